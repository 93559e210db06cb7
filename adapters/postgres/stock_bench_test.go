package postgres_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/adapters/testkit/pgtest"
	"github.com/seckill-dev/seckill/ports"
)

// BenchmarkStockRow compares the final-stock designs under concurrent
// durable transactions that each take k units of one hot SKU and commit:
//
//   - hot-sql: one row, the textbook statement
//     UPDATE sku_stock SET available = available - k WHERE ... AND available >= k
//   - hot: one row through take_stock (the production path with 1 bucket)
//   - buckets8: eight rows through take_stock (random start, unlocked
//     bucket first, then waiting probes)
//
// One op is one transaction. Run with
//
//	go test -run x -bench StockRow -benchtime 3s ./adapters/postgres/
//
// against the local stack (fsync and synchronous_commit on).
func BenchmarkStockRow(b *testing.B) {
	dsn := pgtest.NewDatabase(b)
	checkDurable(b, dsn)
	for _, design := range []string{"hot-sql", "hot", "buckets8"} {
		for _, k := range []int64{1, 50} {
			for _, workers := range []int{4, 16} {
				b.Run(fmt.Sprintf("design=%s/k=%d/workers=%d", design, k, workers), func(b *testing.B) {
					benchStock(b, dsn, design, k, workers)
				})
			}
		}
	}
}

func checkDurable(b *testing.B, dsn string) {
	pool := pgtest.Pool(b, dsn)
	for _, setting := range []string{"fsync", "synchronous_commit"} {
		var v string
		if err := pool.QueryRow(context.Background(), "SHOW "+setting).Scan(&v); err != nil {
			b.Fatal(err)
		}
		if v != "on" {
			b.Fatalf("%s = %s: the measurement needs durable commits", setting, v)
		}
	}
}

var benchActivity atomic.Int64

func benchStock(b *testing.B, dsn, design string, k int64, workers int) {
	ctx := context.Background()
	buckets := 8
	if design != "buckets8" {
		buckets = 1
	}
	store, err := postgres.Open(ctx, postgres.Config{DSN: dsn, MaxConns: int32(workers), MinConns: int32(workers), StockBuckets: buckets},
		prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	pool := pgtest.Pool(b, dsn)
	activityID := time.Now().UnixNano()%1_000_000_000 + benchActivity.Add(1)
	now := time.Now()
	err = store.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		_, _, err := tx.CreateActivity(ctx, ports.Activity{ActivityID: activityID, SKUID: 1, Stock: 1 << 50,
			StartsAt: now, EndsAt: now.Add(time.Hour), PaymentTimeout: time.Minute, ReservationTTL: time.Minute})
		return err
	})
	if err != nil {
		b.Fatal(err)
	}

	take := func(ctx context.Context, tx ports.Tx) error {
		got, err := tx.TakeStock(ctx, activityID, 1, k)
		if err == nil && got != k {
			err = fmt.Errorf("granted %d of %d", got, k)
		}
		return err
	}
	if design == "hot-sql" {
		take = func(ctx context.Context, _ ports.Tx) error {
			c, err := pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer func() { _ = c.Rollback(ctx) }()
			tag, err := c.Exec(ctx, `UPDATE sku_stock SET available = available - $3
				WHERE activity_id = $1 AND sku_id = $2 AND bucket = 0 AND available >= $3`, activityID, 1, k)
			if err != nil {
				return err
			}
			if tag.RowsAffected() != 1 {
				return fmt.Errorf("no stock")
			}
			return c.Commit(ctx)
		}
	}
	run := func(ctx context.Context) error {
		if design == "hot-sql" {
			return take(ctx, nil)
		}
		return store.InTx(ctx, take)
	}

	var next atomic.Int64
	var failed atomic.Value
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if err := run(ctx); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err, ok := failed.Load().(error); ok {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "tx/s")
	b.ReportMetric(float64(b.N)*float64(k)/elapsed.Seconds(), "units/s")
}
