package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/testkit/redistest"
	"github.com/seckill-dev/seckill/ports"
)

func TestBenchReserve(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := ctxT(t)
	res, err := f.s.BenchReserve(ctx, BenchOptions{ActivityID: 900, SKUID: 1, Reservations: 300, Clients: 8})
	if err != nil {
		t.Fatal(err)
	}
	if res.Calls != 300 || res.Reserved != 300 || res.PerSecond <= 0 || res.P99 < res.P50 {
		t.Fatalf("result = %+v", res)
	}
	t.Logf("BenchReserve (race detector on if -race): %s", res)
	if n := f.c.Exists(ctx, f.s.keys.slot(900, 1).stock, f.s.keys.slot(900, 1).rsv("rsv_bench_0")).Val(); n != 0 {
		t.Fatalf("%d keys left after the run", n)
	}
	if f.c.SIsMember(ctx, f.s.keys.slots(), "a900:s1").Val() {
		t.Fatal("slot left registered after the run")
	}
	// The activity SKU must be new.
	f.seed(901, 1, 1)
	_, err = f.s.BenchReserve(ctx, BenchOptions{ActivityID: 901, SKUID: 1, Reservations: 1, Clients: 1})
	wantErr(t, err, ports.ErrAlreadyExists)
}

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
			r := benchSnapshot(BenchOptions{ActivityID: 1, SKUID: 1}, int(i), time.Now())
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
			r := benchSnapshot(BenchOptions{ActivityID: 1, SKUID: 1}, int(seq.Add(1)), time.Now())
			if _, err := s.Reserve(ctx, r, r.CreatedAt); !errors.Is(err, ports.ErrSoldOut) {
				b.Error(fmt.Errorf("want sold out: %w", err))
				return
			}
		}
	})
}
