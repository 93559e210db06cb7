package postgres_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/ports"
)

var activitySeq atomic.Int64

// createActivity stores an activity (sku 1) with stock units and returns
// its id.
func createActivity(t *testing.T, e *env, stock int64) int64 {
	t.Helper()
	id := activitySeq.Add(1)
	now := time.Now()
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		_, created, err := tx.CreateActivity(ctx, ports.Activity{ActivityID: id, SKUID: 1, Stock: stock,
			StartsAt: now, EndsAt: now.Add(time.Hour), PaymentTimeout: 15 * time.Minute, ReservationTTL: 30 * time.Second})
		if err == nil && !created {
			t.Errorf("activity %d not created", id)
		}
		return err
	})
	return id
}

func finalStock(t *testing.T, e *env, activityID int64) int64 {
	t.Helper()
	return e.count(t, `SELECT coalesce(sum(available), 0) FROM sku_stock WHERE activity_id = $1 AND sku_id = 1`, activityID)
}

func take(t *testing.T, e *env, activityID, n int64) int64 {
	t.Helper()
	var got int64
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		var err error
		got, err = tx.TakeStock(ctx, activityID, 1, n)
		return err
	})
	return got
}

// CreateActivity spreads the stock over the configured buckets, is
// idempotent (created = false, stored values returned) and GetActivity
// round-trips the settings.
func TestCreateAndGetActivity(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{StockBuckets: 4})
	starts := time.Date(2030, 1, 2, 3, 4, 5, 123456789, time.FixedZone("x", 3600))
	a := ports.Activity{ActivityID: 42, SKUID: 7, Stock: 10, StartsAt: starts, EndsAt: starts.Add(time.Hour),
		PaymentTimeout: 15 * time.Minute, ReservationTTL: 1500 * time.Millisecond, StockLanes: 3}
	want := a
	want.StartsAt, want.EndsAt = starts.UTC().Truncate(time.Microsecond), starts.Add(time.Hour).UTC().Truncate(time.Microsecond)
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		stored, created, err := tx.CreateActivity(ctx, a)
		if err != nil || !created || stored != want {
			t.Errorf("CreateActivity = %+v, %v, %v; want %+v created", stored, created, err, want)
		}
		return err
	})
	other := a
	other.Stock = 99
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		stored, created, err := tx.CreateActivity(ctx, other)
		if err != nil || created || stored != want {
			t.Errorf("second CreateActivity = %+v, %v, %v; want the stored one, not created", stored, created, err)
		}
		got, err := tx.GetActivity(ctx, 42, 7)
		if err != nil || got != want {
			t.Errorf("GetActivity = %+v, %v", got, err)
		}
		if _, err := tx.GetActivity(ctx, 42, 8); !errors.Is(err, ports.ErrNotFound) {
			t.Errorf("GetActivity of unknown SKU: %v, want ErrNotFound", err)
		}
		return nil
	})
	rows, err := e.db.Query(testCtx(t), `SELECT available FROM sku_stock WHERE activity_id = 42 AND sku_id = 7 ORDER BY bucket`)
	if err != nil {
		t.Fatal(err)
	}
	var buckets []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		buckets = append(buckets, v)
	}
	if len(buckets) != 4 || buckets[0] != 3 || buckets[1] != 3 || buckets[2] != 2 || buckets[3] != 2 {
		t.Fatalf("buckets = %v, want [3 3 2 2]", buckets)
	}
}

// Concurrent CreateActivity calls with the same ids create it once.
func TestCreateActivityConcurrently(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	now := time.Now()
	var created atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			err := e.store.InTx(testCtx(t), func(ctx context.Context, tx ports.Tx) error {
				_, c, err := tx.CreateActivity(ctx, ports.Activity{ActivityID: 5, SKUID: 5, Stock: 100,
					StartsAt: now, EndsAt: now.Add(time.Hour), PaymentTimeout: time.Minute, ReservationTTL: time.Minute})
				if c {
					created.Add(1)
				}
				return err
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if created.Load() != 1 {
		t.Fatalf("created %d times", created.Load())
	}
	if s := e.count(t, `SELECT sum(available) FROM sku_stock WHERE activity_id = 5`); s != 100 {
		t.Fatalf("final stock %d, want 100", s)
	}
}

// TakeStock grants what is left, never more; small stock uses fewer
// buckets than configured; ReturnStock gives units back; unknown SKUs are
// ErrNotFound; partial grants are counted.
func TestTakeAndReturnStock(t *testing.T) {
	t.Parallel()
	for _, buckets := range []int{1, 8} {
		e := newEnv(t, postgres.Config{StockBuckets: buckets})
		a := createActivity(t, e, 10)
		if got := take(t, e, a, 4); got != 4 {
			t.Fatalf("buckets=%d: took %d of 4", buckets, got)
		}
		if got := take(t, e, a, 0); got != 0 {
			t.Fatalf("took %d of 0", got)
		}
		if got := take(t, e, a, 50); got != 6 {
			t.Fatalf("buckets=%d: took %d of 50 with 6 left", buckets, got)
		}
		if got := take(t, e, a, 1); got != 0 {
			t.Fatalf("took %d from an empty stock", got)
		}
		if m := e.metric(t, "inventory_condition_update_miss_total"); m != 2 {
			t.Fatalf("inventory_condition_update_miss_total = %v, want 2", m)
		}
		e.inTx(t, func(ctx context.Context, tx ports.Tx) error { return tx.ReturnStock(ctx, a, 1, 3) })
		if s := finalStock(t, e, a); s != 3 {
			t.Fatalf("final stock %d after returning 3", s)
		}
		if got := take(t, e, a, 3); got != 3 {
			t.Fatalf("took %d of 3 returned units", got)
		}
		err := e.store.InTx(testCtx(t), func(ctx context.Context, tx ports.Tx) error {
			_, err := tx.TakeStock(ctx, 999999, 1, 1)
			return err
		})
		if !errors.Is(err, ports.ErrNotFound) {
			t.Fatalf("TakeStock of unknown SKU: %v", err)
		}
		err = e.store.InTx(testCtx(t), func(ctx context.Context, tx ports.Tx) error {
			return tx.ReturnStock(ctx, 999999, 1, 1)
		})
		if !errors.Is(err, ports.ErrNotFound) {
			t.Fatalf("ReturnStock of unknown SKU: %v", err)
		}
	}
}

// Take then return within one transaction (a refused order gives its unit
// back) works on the rows the transaction already holds.
func TestTakeThenReturnInOneTransaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{StockBuckets: 8})
	a := createActivity(t, e, 100)
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		got, err := tx.TakeStock(ctx, a, 1, 5)
		if err != nil || got != 5 {
			t.Errorf("take = %d, %v", got, err)
		}
		return tx.ReturnStock(ctx, a, 1, 2)
	})
	if s := finalStock(t, e, a); s != 97 {
		t.Fatalf("final stock %d, want 97", s)
	}
}

// Many concurrent transactions taking random batches never take more than
// the stock and never drive a bucket below zero (I1): the grants add up to
// exactly the stock.
func TestTakeStockConcurrentNeverBelowZero(t *testing.T) {
	t.Parallel()
	for _, buckets := range []int{1, 8} {
		e := newEnv(t, postgres.Config{StockBuckets: buckets, MaxConns: 16})
		const stock = 300
		a := createActivity(t, e, stock)
		var (
			granted atomic.Int64
			wg      sync.WaitGroup
		)
		for range 16 {
			wg.Go(func() {
				for {
					n := rand.Int64N(12) + 1
					var got int64
					err := e.store.InTx(testCtx(t), func(ctx context.Context, tx ports.Tx) error {
						var err error
						got, err = tx.TakeStock(ctx, a, 1, n)
						return err
					})
					if err != nil {
						t.Error(err)
						return
					}
					granted.Add(got)
					if got < n {
						return // sold out
					}
				}
			})
		}
		wg.Wait()
		if g := granted.Load(); g != stock {
			t.Fatalf("buckets=%d: granted %d units in total, want exactly %d", buckets, g, stock)
		}
		if neg := e.count(t, `SELECT count(*) FROM sku_stock WHERE available < 0`); neg != 0 {
			t.Fatalf("%d buckets below zero", neg)
		}
		if s := finalStock(t, e, a); s != 0 {
			t.Fatalf("final stock %d, want 0", s)
		}
		if d := e.metric(t, "pg_deadlock_total"); d != 0 {
			t.Fatalf("buckets=%d: %v deadlocks", buckets, d)
		}
	}
}
