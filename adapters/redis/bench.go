package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// BenchOptions configures BenchReserve.
type BenchOptions struct {
	// ActivityID and SKUID name the throwaway activity SKU the run seeds
	// (with Reservations units of stock). Use ids no real activity uses,
	// ideally in a namespace of their own.
	ActivityID, SKUID int64
	// Reservations is the number of Reserve calls, one per distinct user.
	Reservations int
	// Clients is the number of concurrent callers (>= 1).
	Clients int
	// Keep leaves the run's keys in Redis; by default they are deleted
	// afterwards.
	Keep bool
}

// BenchResult is the outcome of BenchReserve.
type BenchResult struct {
	Calls    int
	Reserved int
	Elapsed  time.Duration
	// PerSecond is Calls / Elapsed.
	PerSecond float64
	// P50 and P99 are latencies of single Reserve calls.
	P50, P99 time.Duration
}

// String renders the result on one line.
func (r BenchResult) String() string {
	return fmt.Sprintf("calls=%d reserved=%d elapsed=%s rate=%.0f/s p50=%s p99=%s",
		r.Calls, r.Reserved, r.Elapsed.Round(time.Millisecond), r.PerSecond, r.P50, r.P99)
}

// BenchReserve measures the raw throughput of the reserve script (EVALSHA
// through Store.Reserve, no admission, no broker): it seeds
// opts.ActivityID/opts.SKUID with opts.Reservations units (an open window
// around now), makes opts.Reservations Reserve calls for distinct users
// from opts.Clients goroutines (all waited for before it returns), checks
// that each succeeded, and deletes the run's keys unless opts.Keep. The
// activity SKU must not exist yet.
func (s *Store) BenchReserve(ctx context.Context, opts BenchOptions) (BenchResult, error) {
	if opts.Reservations <= 0 || opts.Clients <= 0 {
		return BenchResult{}, errors.New("redis bench: Reservations and Clients must be > 0")
	}
	sk := s.keys.slot(opts.ActivityID, opts.SKUID)
	if n, err := s.client.Exists(ctx, sk.rules, sk.stock).Result(); err != nil {
		return BenchResult{}, wrapErr("bench: check slot", err)
	} else if n > 0 {
		return BenchResult{}, fmt.Errorf("redis bench: activity %d sku %d exists already: %w",
			opts.ActivityID, opts.SKUID, ports.ErrAlreadyExists)
	}
	now := time.Now()
	err := s.SeedActivity(ctx, ports.Activity{
		ActivityID: opts.ActivityID, SKUID: opts.SKUID, Stock: int64(opts.Reservations),
		StartsAt: now.Add(-time.Hour), EndsAt: now.Add(24 * time.Hour),
		ReservationTTL: time.Minute, PaymentTimeout: 15 * time.Minute,
	})
	if err != nil {
		return BenchResult{}, err
	}
	if !opts.Keep {
		defer s.benchCleanup(opts)
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
				_, err := s.Reserve(ctx, benchSnapshot(opts, i, t0), t0)
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
		return BenchResult{}, fmt.Errorf("redis bench: %w", firstErr)
	}
	if err := ctx.Err(); err != nil {
		return BenchResult{}, fmt.Errorf("redis bench: %w", err)
	}
	slices.Sort(latencies)
	return BenchResult{
		Calls:     opts.Reservations,
		Reserved:  int(reserved.Load()),
		Elapsed:   elapsed,
		PerSecond: float64(opts.Reservations) / elapsed.Seconds(),
		P50:       latencies[len(latencies)/2],
		P99:       latencies[len(latencies)*99/100],
	}, nil
}

func benchSnapshot(opts BenchOptions, i int, now time.Time) reservation.Snapshot {
	n := strconv.Itoa(i)
	created := now.UTC().Truncate(time.Millisecond)
	return reservation.Snapshot{
		ReservationID: "rsv_bench_" + n, OrderID: "ord_bench_" + n, MessageID: "evt_bench_" + n,
		RequestID: "req_bench_" + n, ActivityID: opts.ActivityID, SKUID: opts.SKUID, UserID: int64(i) + 1,
		Status: reservation.StatusPending, CreatedAt: created, ValidUntil: created.Add(time.Minute), Version: 1,
	}
}

// benchCleanup deletes the keys of a BenchReserve run. It uses a fresh
// context so that a canceled run still cleans up, bounded by a timeout.
func (s *Store) benchCleanup(opts BenchOptions) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sk := s.keys.slot(opts.ActivityID, opts.SKUID)
	batch := []string{sk.stock, sk.rules, sk.holders, sk.pending, sk.unresolved, sk.pendingCreated}
	flush := func() {
		if len(batch) == 0 {
			return
		}
		if err := s.client.Unlink(ctx, batch...).Err(); err != nil {
			s.logger.WarnContext(ctx, "bench cleanup failed", "error", err, "activity_id", opts.ActivityID, "sku_id", opts.SKUID)
		}
		batch = batch[:0]
	}
	for i := range opts.Reservations {
		batch = append(batch, sk.rsv("rsv_bench_"+strconv.Itoa(i)))
		if len(batch) >= 500 {
			flush()
		}
	}
	flush()
	if err := s.client.SRem(ctx, s.keys.slots(), s.keys.slotID(opts.ActivityID, opts.SKUID)).Err(); err != nil {
		s.logger.WarnContext(ctx, "bench cleanup failed", "error", err, "activity_id", opts.ActivityID, "sku_id", opts.SKUID)
	}
}
