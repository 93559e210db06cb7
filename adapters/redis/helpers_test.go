package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/adapters/testkit/redistest"
	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// base is the fixed "now" of most tests; activities are open around it.
var testBase = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

type fixture struct {
	t     testing.TB
	s     *Store
	c     *goredis.Client
	reg   *prometheus.Registry
	seq   atomic.Int64
	clock atomic.Int64 // ms; used when the test installs it as Config.Clock
}

// option adjusts a fixture's Config before the Store is built.
type option func(*fixture, *Config)

// with wraps a plain Config change.
func with(m func(*Config)) option { return func(_ *fixture, c *Config) { m(c) } }

// withClock installs the fixture's clock (see advance) as Config.Clock.
func withClock(f *fixture, c *Config) {
	c.Clock = func() time.Time { return time.UnixMilli(f.clock.Load()).UTC() }
}

func newFixture(t testing.TB, opts ...option) *fixture {
	t.Helper()
	c, ns := redistest.New(t)
	f := &fixture{t: t, c: c, reg: prometheus.NewRegistry()}
	f.clock.Store(testBase.UnixMilli())
	cfg := Config{Namespace: ns}
	for _, o := range opts {
		o(f, &cfg)
	}
	s, err := New(c, cfg, f.reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	f.s = s
	return f
}

func (f *fixture) advance(d time.Duration) { f.clock.Add(d.Milliseconds()) }

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// seed creates an activity SKU open from base-1h to base+1h.
func (f *fixture) seed(activityID, skuID, stock int64) ports.Activity {
	f.t.Helper()
	a := ports.Activity{
		ActivityID: activityID, SKUID: skuID, Stock: stock,
		StartsAt: testBase.Add(-time.Hour), EndsAt: testBase.Add(time.Hour),
		PaymentTimeout: 15 * time.Minute, ReservationTTL: 30 * time.Second,
	}
	if err := f.s.SeedActivity(ctxT(f.t), a); err != nil {
		f.t.Fatalf("SeedActivity: %v", err)
	}
	return a
}

// newRsv builds a new PENDING reservation created at at with fresh ids.
func (f *fixture) newRsv(activityID, skuID, userID int64, at time.Time) reservation.Snapshot {
	f.t.Helper()
	n := f.seq.Add(1)
	r, err := reservation.New(reservation.NewReservation{
		ReservationID: fmt.Sprintf("rsv_%d_%d", userID, n),
		OrderID:       fmt.Sprintf("ord_%d_%d", userID, n),
		MessageID:     fmt.Sprintf("evt_%d_%d", userID, n),
		RequestID:     fmt.Sprintf("req_%d_%d", userID, n),
		ActivityID:    activityID, SKUID: skuID, UserID: userID, TTL: 30 * time.Second,
	}, at)
	if err != nil {
		f.t.Fatalf("reservation.New: %v", err)
	}
	return r.Snapshot()
}

// reserve stores a new reservation and fails the test on error.
func (f *fixture) reserve(activityID, skuID, userID int64, at, firstAttempt time.Time) reservation.Snapshot {
	f.t.Helper()
	r := f.newRsv(activityID, skuID, userID, at)
	got, err := f.s.Reserve(ctxT(f.t), r, firstAttempt)
	if err != nil {
		f.t.Fatalf("Reserve: %v", err)
	}
	return got
}

func ref(r reservation.Snapshot) ports.ReservationRef {
	return ports.ReservationRef{ActivityID: r.ActivityID, SKUID: r.SKUID, ReservationID: r.ReservationID}
}

func (f *fixture) get(r reservation.Snapshot) storedReservation {
	f.t.Helper()
	st, err := f.s.get(ctxT(f.t), ref(r))
	if err != nil {
		f.t.Fatalf("get %s: %v", r.ReservationID, err)
	}
	return st
}

func (f *fixture) inventory(activityID, skuID int64) ports.RedisInventory {
	f.t.Helper()
	inv, err := f.s.Inventory(ctxT(f.t), activityID, skuID)
	if err != nil {
		f.t.Fatalf("Inventory: %v", err)
	}
	return inv
}

// zscore returns the score of member in key, or -1 when absent.
func (f *fixture) zscore(key, member string) int64 {
	f.t.Helper()
	v, err := f.c.ZScore(ctxT(f.t), key, member).Result()
	if errors.Is(err, goredis.Nil) {
		return -1
	}
	if err != nil {
		f.t.Fatalf("ZSCORE %s: %v", key, err)
	}
	return int64(v)
}

func wantErr(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error = %v, want %v", err, target)
	}
}

func goredisZ(score int64, member string) goredis.Z {
	return goredis.Z{Score: float64(score), Member: member}
}
