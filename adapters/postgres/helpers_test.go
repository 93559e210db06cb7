package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/adapters/testkit/pgtest"
	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

// env is one test's database: the store under test, a direct pool for
// assertions and the store's metrics registry.
type env struct {
	store *postgres.Store
	db    *pgxpool.Pool
	reg   *prometheus.Registry
	dsn   string
}

func newEnv(t *testing.T, cfg postgres.Config) *env {
	t.Helper()
	dsn := pgtest.NewDatabase(t)
	cfg.DSN = dsn
	if cfg.MaxConns == 0 {
		cfg.MaxConns = 8
	}
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := postgres.Open(ctx, cfg, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(s.Close)
	return &env{store: s, db: pgtest.Pool(t, dsn), reg: reg, dsn: dsn}
}

// ctx returns a context bounded so that a hang fails the test instead of
// the whole run.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// inTx runs fn in a transaction and fails the test on error.
func (e *env) inTx(t *testing.T, fn func(ctx context.Context, tx ports.Tx) error) {
	t.Helper()
	if err := e.store.InTx(testCtx(t), fn); err != nil {
		t.Fatalf("InTx: %v", err)
	}
}

// count runs a count(*)-style query on the direct pool.
func (e *env) count(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := e.db.QueryRow(testCtx(t), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// metric returns the value of a counter or gauge registered by the store.
func (e *env) metric(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var sum float64
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
		return sum
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

var idSeq atomic.Int64

// newID returns an id unique within the test binary.
func newID(kind string) string {
	return fmt.Sprintf("%s_%d_%d", kind, time.Now().UnixNano(), idSeq.Add(1))
}

// newOrder creates an order aggregate (version 1) for user on activity
// 1/sku 1 unless overridden.
func newOrder(t *testing.T, activityID, skuID, userID int64, now time.Time) *order.Order {
	t.Helper()
	o, err := order.Create(order.NewOrder{
		OrderID: newID("ord"), ReservationID: newID("rsv"), MessageID: newID("evt"),
		ActivityID: activityID, SKUID: skuID, UserID: userID, Quantity: 1,
		ReservedAt: now.Add(-time.Second), PaymentTimeout: 15 * time.Minute,
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func mustBeTransient(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, ports.ErrTransient) {
		t.Fatalf("error %v does not match ports.ErrTransient", err)
	}
}
