// Package reserveceiling measures the ceiling of the reserve script: the
// raw throughput of Store.Reserve (EVALSHA, no admission, no broker) on a
// throwaway activity SKU it seeds, every call a new buyer. The place and
// sale benches print it beside the service's rate, and hot-sku runs it on
// the Redis Cluster for each stock lane count.
package reserveceiling

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill-dev/seckill/adapters/redis"
	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// Options configures Measure.
type Options struct {
	// ActivityID and SKUID name the throwaway activity SKU the run seeds
	// (with Reservations units of stock); it must not exist yet.
	ActivityID, SKUID int64
	// Reservations is the number of Reserve calls, one per distinct user.
	Reservations int
	// Clients is the number of concurrent callers (>= 1).
	Clients int
	// Lanes is the number of stock lanes of the seeded activity SKU
	// (ports.Activity.StockLanes; 0 or 1: one slot).
	Lanes int
}

// Result is what Measure measured.
type Result struct {
	// Calls is the number of Reserve calls made (Options.Reservations).
	Calls int
	// Reserved is the number of calls that reserved a unit.
	Reserved int
	// Elapsed is the time from the first call to the last answer.
	Elapsed time.Duration
	// PerSecond is Calls / Elapsed.
	PerSecond float64
	// P50 and P99 are latencies of single Reserve calls.
	P50, P99 time.Duration
}

// String renders the result on one line.
func (r Result) String() string {
	return fmt.Sprintf("calls=%d reserved=%d elapsed=%s rate=%.0f/s p50=%s p99=%s",
		r.Calls, r.Reserved, r.Elapsed.Round(time.Millisecond), r.PerSecond, r.P50, r.P99)
}

// Measure measures the raw throughput of the reserve script
// (EVALSHA through Store.Reserve, no admission, no broker): it seeds
// opts.ActivityID/opts.SKUID with opts.Reservations units (an open window
// around now), makes opts.Reservations Reserve calls for distinct users
// from opts.Clients goroutines (all waited for before it returns) and
// checks that each succeeded. The activity SKU must not exist yet
// (ports.ErrAlreadyExists). It uses the store's exported API only and
// leaves the run's keys behind: run it on a scratch Redis database (the
// benchmarks' scratch stack empties its leased database when it closes).
func Measure(ctx context.Context, store *redis.Store, opts Options) (Result, error) {
	if opts.Reservations <= 0 || opts.Clients <= 0 {
		return Result{}, errors.New("reserve ceiling: Reservations and Clients must be > 0")
	}
	switch _, err := store.Inventory(ctx, opts.ActivityID, opts.SKUID); {
	case err == nil:
		return Result{}, fmt.Errorf("reserve ceiling: activity %d sku %d exists already: %w",
			opts.ActivityID, opts.SKUID, ports.ErrAlreadyExists)
	case !errors.Is(err, ports.ErrNotFound):
		return Result{}, fmt.Errorf("reserve ceiling: %w", err)
	}
	now := time.Now()
	err := store.SeedActivity(ctx, ports.Activity{
		ActivityID: opts.ActivityID, SKUID: opts.SKUID, Stock: int64(opts.Reservations),
		StartsAt: now.Add(-time.Hour), EndsAt: now.Add(24 * time.Hour),
		ReservationTTL: time.Minute, PaymentTimeout: 15 * time.Minute, StockLanes: opts.Lanes,
	})
	if err != nil {
		return Result{}, err
	}

	var (
		next      atomic.Int64
		reserved  atomic.Int64
		latencies = make([]time.Duration, opts.Reservations)
		errMu     sync.Mutex
		firstErr  error
		wg        sync.WaitGroup
	)
	start := time.Now()
	for range min(opts.Clients, opts.Reservations) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= opts.Reservations {
					return
				}
				t0 := time.Now()
				_, err := store.Reserve(ctx, ceilingSnapshot(opts, i, t0), t0)
				latencies[i] = time.Since(t0)
				if err != nil {
					errMu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					errMu.Unlock()
					return
				}
				reserved.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return Result{}, fmt.Errorf("reserve ceiling: %w", firstErr)
	}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("reserve ceiling: %w", err)
	}
	slices.Sort(latencies)
	return Result{
		Calls:     opts.Reservations,
		Reserved:  int(reserved.Load()),
		Elapsed:   elapsed,
		PerSecond: float64(opts.Reservations) / elapsed.Seconds(),
		P50:       latencies[len(latencies)/2],
		P99:       latencies[len(latencies)*99/100],
	}, nil
}

// ceilingSnapshot is the i-th reservation of a Measure run: a new
// PENDING reservation of user i+1.
func ceilingSnapshot(opts Options, i int, now time.Time) reservation.Snapshot {
	n := strconv.Itoa(i)
	created := now.UTC().Truncate(time.Millisecond)
	return reservation.Snapshot{
		ReservationID: "rsv_bench_" + n, OrderID: "ord_bench_" + n, MessageID: "evt_bench_" + n,
		RequestID: "req_bench_" + n, ActivityID: opts.ActivityID, SKUID: opts.SKUID, UserID: int64(i) + 1,
		Status: reservation.StatusPending, CreatedAt: created, ValidUntil: created.Add(time.Minute), Version: 1,
	}
}
