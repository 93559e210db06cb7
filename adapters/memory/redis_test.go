package memory_test

import (
	"errors"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/memory"
	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

func newRedis(t *testing.T, rl memory.RateLimit) (*memory.Redis, *memory.Clock) {
	t.Helper()
	c := memory.NewClock(start)
	return memory.NewRedis(memory.RedisConfig{Clock: c, RateLimit: rl}), c
}

func TestRedisClaimExpiresOnClock(t *testing.T) {
	r, clock := newRedis(t, memory.RateLimit{Capacity: -1})
	ctx := t.Context()
	c := ports.RequestClaim{UserID: 1, RequestID: "q", ActivityID: 1, SKUID: 1, ReservationID: "rsv_1", OrderID: "ord_1", MessageID: "evt_1"}
	if _, _, err := r.ClaimRequest(ctx, c, time.Minute); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	if _, err := r.LookupOrder(ctx, 1, "ord_1"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("LookupOrder after the ttl = %v, want ErrNotFound", err)
	}
	other := c
	other.SKUID, other.OrderID = 2, "ord_2"
	if _, existing, err := r.ClaimRequest(ctx, other, time.Minute); err != nil || existing {
		t.Fatalf("ClaimRequest after expiry = %v, existing %v; want a fresh claim", err, existing)
	}
}

func TestRedisRateLimitDisabled(t *testing.T) {
	r, _ := newRedis(t, memory.RateLimit{Capacity: -1})
	for i := range 50 {
		c := ports.RequestClaim{UserID: 1, RequestID: string(rune('a' + i)), ActivityID: 1, SKUID: 1,
			ReservationID: "r", OrderID: "o" + string(rune('a'+i)), MessageID: "m"}
		if _, _, err := r.ClaimRequest(t.Context(), c, time.Hour); err != nil {
			t.Fatalf("claim %d without rate limit: %v", i, err)
		}
	}
}

func TestRedisReserveLostReply(t *testing.T) {
	r, _ := newRedis(t, memory.RateLimit{})
	ctx := t.Context()
	a := ports.Activity{ActivityID: 1, SKUID: 1, Stock: 1, StartsAt: start, EndsAt: start.Add(time.Hour),
		PaymentTimeout: time.Minute, ReservationTTL: time.Minute}
	if err := r.SeedActivity(ctx, a); err != nil {
		t.Fatal(err)
	}
	rsv, err := reservation.New(reservation.NewReservation{ReservationID: "rsv_1", OrderID: "ord_1", MessageID: "evt_1",
		RequestID: "q", ActivityID: 1, SKUID: 1, UserID: 7, TTL: time.Minute}, start.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	r.Inject("Reserve", memory.Fault{Err: ports.ErrTransient, AfterEffect: true, Times: 1})
	if _, err := r.Reserve(ctx, rsv.Snapshot(), start); !errors.Is(err, ports.ErrTransient) {
		t.Fatalf("Reserve with a lost reply = %v, want the injected error", err)
	}
	got, err := r.Reserve(ctx, rsv.Snapshot(), start)
	if err != nil || got.Status != reservation.StatusPending {
		t.Fatalf("retried Reserve = %+v, %v; want the stored PENDING reservation", got, err)
	}
	snap := r.Snapshot().Slots[memory.SKU{ActivityID: 1, SKUID: 1}]
	if snap.Stock != 0 || len(snap.Reservations) != 1 || snap.Holders[7] != "rsv_1" {
		t.Fatalf("slot after a lost reply and a retry = %+v, want one unit taken once", snap)
	}
	if !snap.Reservations[0].NextAttemptAt.Equal(start) {
		t.Fatalf("next attempt %v, want %v", snap.Reservations[0].NextAttemptAt, start)
	}
}
