package redis

import (
	"testing"
	"time"

	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// TestResolvedReservationsExpireAfterTheRetention: with
// Config.ReservationRetention a reservation's hash gets that TTL when it
// becomes ORDERED (MarkOrdered) or RELEASED (Release, ReleaseMany), and an
// unresolved one keeps no TTL; without it every hash is kept for good.
func TestResolvedReservationsExpireAfterTheRetention(t *testing.T) {
	t.Parallel()
	const retention = 10 * time.Minute
	f := newFixture(t, with(func(c *Config) { c.ReservationRetention = retention }))
	ctx := ctxT(t)
	f.seed(1, 1, 10)
	sk := f.s.keys.slot(1, 1)
	ttl := func(r reservation.Snapshot) time.Duration {
		t.Helper()
		d, err := f.c.PTTL(ctx, sk.rsv(r.ReservationID)).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	within := func(what string, d time.Duration) {
		t.Helper()
		if d <= 0 || d > retention {
			t.Errorf("%s: TTL %s, want (0, %s]", what, d, retention)
		}
	}
	pending := f.reserve(1, 1, 1, testBase, testBase)
	ordered := f.reserve(1, 1, 2, testBase, testBase)
	released := f.reserve(1, 1, 3, testBase, testBase)
	many := f.reserve(1, 1, 4, testBase, testBase)
	if err := f.s.MarkOrdered(ctx, []ports.ReservationRef{ref(ordered)}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Release(ctx, ref(released), reservation.ReasonOrderCanceled); err != nil {
		t.Fatal(err)
	}
	if res := f.s.ReleaseMany(ctx, []ports.ReleaseRequest{{Ref: ref(many), Reason: reservation.ReasonOrderCanceled}}); res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
	if d := ttl(pending); d != -1 {
		t.Errorf("an unresolved reservation has TTL %s, want none", d)
	}
	within("ordered", ttl(ordered))
	within("released", ttl(released))
	within("released in a batch", ttl(many))

	// An ordered reservation canceled later gets the retention again from
	// its release.
	if err := f.c.PExpire(ctx, sk.rsv(ordered.ReservationID), time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Release(ctx, ref(ordered), reservation.ReasonOrderCanceled); err != nil {
		t.Fatal(err)
	}
	if d := ttl(ordered); d <= time.Minute {
		t.Errorf("ordered then released: TTL %s, want the retention again", d)
	}

	// Without the setting nothing expires.
	g := newFixture(t)
	g.seed(1, 1, 10)
	kept := g.reserve(1, 1, 1, testBase, testBase)
	if _, err := g.s.Release(ctx, ref(kept), reservation.ReasonOrderCanceled); err != nil {
		t.Fatal(err)
	}
	if d, err := g.c.PTTL(ctx, g.s.keys.slot(1, 1).rsv(kept.ReservationID)).Result(); err != nil || d != -1 {
		t.Errorf("no retention: TTL %s (%v), want none", d, err)
	}
}
