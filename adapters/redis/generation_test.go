package redis

import (
	"io"
	"log/slog"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/adapters/testkit/redistest"
	"github.com/seckill-dev/seckill/ports"
)

// guardedFixture returns a fixture whose Store's client runs a Guard on
// every new connection (on a fresh namespace of the leased database; the
// fixture's own client, f.c, has no guard), and the generation the first
// connection found pending.
func guardedFixture(t *testing.T) (*fixture, string) {
	t.Helper()
	base, ns := redistest.New(t)
	g, err := NewGuard(ns, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(clientOptions(base, g))
	t.Cleanup(func() { _ = c.Close() })
	s, err := New(c, Config{Namespace: ns, Guard: g}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, s: s, c: base}
	f.clock.Store(testBase.UnixMilli())
	gen, err := s.RecoveryPending(ctxT(t))
	if err != nil || gen == "" {
		t.Fatalf("RecoveryPending on a fresh namespace = %q, %v; want the run id pending", gen, err)
	}
	return f, gen
}

// clientOptions are the connection options of c with g as OnConnect hook.
func clientOptions(c *goredis.Client, g *Guard) *goredis.Options {
	o := c.Options()
	return &goredis.Options{Addr: o.Addr, Username: o.Username, Password: o.Password, DB: o.DB, OnConnect: g.OnConnect}
}

// reconnect drops every pooled connection of s and returns a Store on a
// new client, so the next command runs the guard again (as after a Redis
// restart).
func reconnect(t *testing.T, s *Store) *Store {
	t.Helper()
	old := s.client.(*goredis.Client)
	c := goredis.NewClient(clientOptions(old, s.cfg.Guard))
	_ = old.Close()
	t.Cleanup(func() { _ = c.Close() })
	n, err := New(c, s.cfg, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// comeBackAsAnotherProcess plays a Redis that came back as another process:
// the verified generation names another run_id, the Store reconnects (the
// guard runs on the new connections) and a generation is pending; it
// returns that generation.
func (f *fixture) comeBackAsAnotherProcess(t *testing.T) string {
	t.Helper()
	ctx := ctxT(t)
	if err := f.c.HSet(ctx, f.s.keys.generation(), "run_id", "the-process-that-acknowledged").Err(); err != nil {
		t.Fatal(err)
	}
	f.s = reconnect(t, f.s)
	gen, err := f.s.RecoveryPending(ctx)
	if err != nil || gen == "" {
		t.Fatalf("RecoveryPending after a new process = %q, %v", gen, err)
	}
	return gen
}

// TestGuardFreezesANewRedisProcessAndRebuildReopensTheBooks plays a Redis
// that came back older than what it acknowledged: the guard freezes the
// books on the first connection, Reserve answers ErrStockPaused, the
// rebuild recounts the stock from PostgreSQL's facts plus what is in
// flight, an order whose reservation Redis lost is adopted once, and the
// generation is verified at the end.
func TestGuardFreezesANewRedisProcessAndRebuildReopensTheBooks(t *testing.T) {
	t.Parallel()
	// A fresh Redis: the first connection finds no verified generation.
	f, gen := guardedFixture(t)
	s, base, ctx := f.s, f.c, ctxT(t)
	if ok, err := s.FinishRecovery(ctx, gen); !ok || err != nil {
		t.Fatalf("FinishRecovery = %v, %v", ok, err)
	}
	act := f.seed(1, 1, 10)
	r1 := f.reserve(1, 1, 1, testBase, testBase)
	r2 := f.reserve(1, 1, 2, testBase, testBase)
	r3 := f.reserve(1, 1, 3, testBase, testBase)
	lost := f.newRsv(1, 1, 5, testBase) // acknowledged by the lost process, consumed later

	// Redis comes back as another process with an older data set: r3's
	// reservation is gone and its unit is back in the counter.
	sk := s.keys.slot(1, 1)
	base.Del(ctx, sk.rsv(r3.ReservationID))
	base.HDel(ctx, sk.holders, "3")
	base.ZRem(ctx, sk.unresolved, r3.ReservationID)
	base.ZRem(ctx, sk.pending, r3.ReservationID)
	base.ZRem(ctx, sk.pendingCreated, r3.ReservationID)
	base.IncrBy(ctx, sk.stock, 1)

	gen = f.comeBackAsAnotherProcess(t)
	s = f.s
	_, err := s.Reserve(ctx, f.newRsv(1, 1, 4, testBase), testBase)
	wantErr(t, err, ports.ErrStockPaused)

	// PostgreSQL: r3 became an order (its message was in the broker), r2
	// was rejected, r1 is undecided.
	inflight, err := s.InFlight(ctx, gen, act)
	if err != nil || len(inflight) != 2 {
		t.Fatalf("InFlight = %d reservations, %v; want r1 and r2", len(inflight), err)
	}
	res, err := s.Rebuild(ctx, ports.StockRebuild{Generation: gen, Activity: act, Base: 10 - 1,
		InFlight: []string{r1.ReservationID}, Released: []string{r2.ReservationID},
		Holders: []ports.Holder{{UserID: 3, ReservationID: r3.ReservationID}}})
	if err != nil {
		t.Fatalf("Rebuild: %v", err)
	}
	if res != (ports.RebuildResult{Available: 8, InFlight: 1}) {
		t.Fatalf("Rebuild = %+v, want 8 available, 1 in flight", res)
	}
	if st := f.get(r2).Status; st != "RELEASED" {
		t.Fatalf("r2 after rebuild: %s, want RELEASED", st)
	}
	if n, err := s.Release(ctx, ports.ReservationRef{ActivityID: 1, SKUID: 1, ReservationID: r2.ReservationID}, "NO_FINAL_STOCK"); err != nil || n {
		t.Fatalf("late release of r2 = %v, %v; want no unit back (the rebuild counted it)", n, err)
	}
	_, err = s.Reserve(ctx, f.newRsv(1, 1, 3, testBase), testBase)
	wantErr(t, err, ports.ErrAlreadyPurchased)
	f.reserve(1, 1, 4, testBase, testBase)
	if inv := f.inventory(1, 1); inv.Available != 7 {
		t.Fatalf("available after one more reservation = %d, want 7", inv.Available)
	}

	// The lost reservation's order arrives after the rebuild: adopted once.
	ref := ports.ReservationRef{ActivityID: 1, SKUID: 1, ReservationID: lost.ReservationID, UserID: 5}
	for range 2 {
		if err := s.MarkOrdered(ctx, []ports.ReservationRef{ref}); err != nil {
			t.Fatalf("MarkOrdered: %v", err)
		}
	}
	if inv := f.inventory(1, 1); inv.Available != 6 {
		t.Fatalf("available after adopting the lost order = %d, want 6", inv.Available)
	}
	_, err = s.Reserve(ctx, f.newRsv(1, 1, 5, testBase), testBase)
	wantErr(t, err, ports.ErrAlreadyPurchased)

	// Reopened: a second rebuild of the same generation is refused.
	_, err = s.Rebuild(ctx, ports.StockRebuild{Generation: gen, Activity: act, Base: 10})
	wantErr(t, err, ports.ErrStockPaused)
	if ok, err := s.FinishRecovery(ctx, gen); !ok || err != nil {
		t.Fatalf("FinishRecovery = %v, %v", ok, err)
	}
	if ok, _ := s.FinishRecovery(ctx, gen); ok {
		t.Fatal("FinishRecovery twice succeeded twice")
	}
	if g, _ := s.RecoveryPending(ctx); g != "" {
		t.Fatalf("RecoveryPending after finish = %q", g)
	}
	s = reconnect(t, s)
	f.s = s
	f.reserve(1, 1, 6, testBase, testBase) // the verified process: no freeze
}

// TestRebuildSeedsAnActivityRedisLostEntirely covers a Redis that came back
// empty: Reserve answers ErrStockPaused (not ACTIVITY_NOT_FOUND) until the
// rebuild seeded the activity from PostgreSQL.
func TestRebuildSeedsAnActivityRedisLostEntirely(t *testing.T) {
	t.Parallel()
	f, gen := guardedFixture(t)
	s, ctx := f.s, ctxT(t)
	r := f.newRsv(7, 1, 1, testBase)
	_, err := s.Reserve(ctx, r, testBase)
	wantErr(t, err, ports.ErrStockPaused)
	act := ports.Activity{ActivityID: 7, SKUID: 1, Stock: 5, StartsAt: r.CreatedAt.Add(-60e9), EndsAt: r.CreatedAt.Add(3600e9),
		PaymentTimeout: 60e9, ReservationTTL: 30e9}
	res, err := s.Rebuild(ctx, ports.StockRebuild{Generation: gen, Activity: act, Base: 5 - 2,
		Holders: []ports.Holder{{UserID: 8, ReservationID: "r8"}, {UserID: 9, ReservationID: "r9"}}})
	if err != nil || res.Available != 3 {
		t.Fatalf("Rebuild = %+v, %v; want 3 available", res, err)
	}
	if _, err := s.FinishRecovery(ctx, gen); err != nil {
		t.Fatal(err)
	}
	f.reserve(7, 1, 1, testBase, testBase)
	_, err = s.Reserve(ctx, f.newRsv(7, 1, 8, testBase), testBase)
	wantErr(t, err, ports.ErrAlreadyPurchased)
}
