package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/testkit/redistest"
	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// BenchmarkReserve measures Reserve (one EVALSHA of the reserve script per
// op) against the real Redis, from GOMAXPROCS * 8 goroutines. Run with
// `go test -run '^$' -bench Reserve ./adapters/redis/`.
func BenchmarkReserve(b *testing.B) {
	c, ns := redistest.New(b)
	s, err := New(c, Config{Namespace: ns}, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now()
	if err := s.SeedActivity(ctx, ports.Activity{
		ActivityID: 1, SKUID: 1, Stock: int64(b.N) + 1,
		StartsAt: now.Add(-time.Hour), EndsAt: now.Add(time.Hour), ReservationTTL: time.Minute,
	}); err != nil {
		b.Fatal(err)
	}
	var seq atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := seq.Add(1)
			r := benchSnapshot(int(i), time.Now())
			if _, err := s.Reserve(ctx, r, r.CreatedAt); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reserves/s")
}

// BenchmarkReserveSoldOut measures the rejection path (stock 0), the common
// case during a flash sale once the stock is gone.
func BenchmarkReserveSoldOut(b *testing.B) {
	c, ns := redistest.New(b)
	s, err := New(c, Config{Namespace: ns}, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now()
	if err := s.SeedActivity(ctx, ports.Activity{
		ActivityID: 1, SKUID: 1, Stock: 0,
		StartsAt: now.Add(-time.Hour), EndsAt: now.Add(time.Hour), ReservationTTL: time.Minute,
	}); err != nil {
		b.Fatal(err)
	}
	var seq atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r := benchSnapshot(int(seq.Add(1)), time.Now())
			if _, err := s.Reserve(ctx, r, r.CreatedAt); !errors.Is(err, ports.ErrSoldOut) {
				b.Error(fmt.Errorf("want sold out: %w", err))
				return
			}
		}
	})
}

// benchSnapshot returns the i-th new PENDING reservation of the benchmarks
// (activity 1, SKU 1, user i+1), created at now.
func benchSnapshot(i int, now time.Time) reservation.Snapshot {
	n := strconv.Itoa(i)
	created := now.UTC().Truncate(time.Millisecond)
	return reservation.Snapshot{
		ReservationID: "rsv_bench_" + n, OrderID: "ord_bench_" + n, MessageID: "evt_bench_" + n,
		RequestID: "req_bench_" + n, ActivityID: 1, SKUID: 1, UserID: int64(i) + 1,
		Status: reservation.StatusPending, CreatedAt: created, ValidUntil: created.Add(time.Minute), Version: 1,
	}
}
