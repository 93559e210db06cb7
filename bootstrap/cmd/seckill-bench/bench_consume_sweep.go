package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/seckill-dev/seckill/adapters/memory"
	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/application"
	"github.com/seckill-dev/seckill/bootstrap"
	"github.com/seckill-dev/seckill/bootstrap/config"
)

// consumeRun is one mode of `bench consume`: n messages drained in batches
// of batch by at most concurrency transactions; direct hands them to the
// handler without the broker (the ceiling), adaptive puts the order-create
// runner under the adaptive limiter (budget: concurrency), slow delays
// every order-create transaction by that much (PostgreSQL slowed).
type consumeRun struct {
	n, batch, concurrency int
	direct, adaptive      bool
	slow                  time.Duration
	// notes, when set, receives what the mode has to say beside its
	// figures (the limiter's last state).
	notes func(string)
}

// report passes s to the run's notes, if any.
func (r consumeRun) report(s string) {
	if r.notes != nil {
		r.notes(s)
	}
}

// consumeSweep measures orders/s through the broker for each fixed
// concurrency of levels, then with the adaptive limiter and no tuning (its
// budget the largest level), all with the same batch and slowdown, and
// prints each beside the best fixed one.
func consumeSweep(ctx context.Context, stdout io.Writer, cfg config.Config, rc *goredis.Client, log *slog.Logger, base consumeRun,
	levels []int) error {
	fmt.Fprintf(stdout, "seckill-bench consume --sweep: %s, %d cores, %d messages per mode for one hot SKU, batch %d, PostgreSQL pool %d, "+
		"delay inside each transaction %v, fresh database per mode\n\n", brokerText(cfg), runtime.NumCPU(), base.n, base.batch,
		cfg.Postgres.MaxConns, base.slow)
	fmt.Fprintf(stdout, "%-32s %10s %12s %10s %s\n", "mode", "orders", "orders/s", "elapsed", "invariants")
	var best float64
	bestAt := 0
	for _, c := range levels {
		run := base
		run.concurrency = c
		created, elapsed, check, err := consumeMode(ctx, cfg, rc, log, run)
		if err != nil {
			return err
		}
		rate := float64(created) / elapsed.Seconds()
		if rate > best {
			best, bestAt = rate, c
		}
		fmt.Fprintf(stdout, "%-32s %10d %12.0f %10s %s\n", fmt.Sprintf("fixed concurrency %d", c), created, rate,
			elapsed.Round(time.Millisecond), check)
	}
	run := base
	run.concurrency, run.adaptive = slices.Max(levels), true
	var notes []string
	run.notes = func(s string) { notes = append(notes, s) }
	created, elapsed, check, err := consumeMode(ctx, cfg, rc, log, run)
	if err != nil {
		return err
	}
	rate := float64(created) / elapsed.Seconds()
	fmt.Fprintf(stdout, "%-32s %10d %12.0f %10s %s\n", fmt.Sprintf("adaptive, budget %d", run.concurrency), created, rate,
		elapsed.Round(time.Millisecond), check)
	for _, n := range notes {
		fmt.Fprintf(stdout, "  %s\n", n)
	}
	fmt.Fprintf(stdout, "\nadaptive: %.2fx the best fixed concurrency (%d: %.0f orders/s)\n", rate/best, bestAt, best)
	return nil
}

// benchLimits returns the adaptive limiter of the order-create group
// alone, as the service builds it (application.ConsumerLimits with its
// defaults, the floor 2, a tick of 1 s), reading the store's pool and lock
// waits; the backlog it sees is the bench's: every message is published
// before the consumer starts, so the oldest is as old as the run.
func benchLimits(store *postgres.Store, group string, batch, budget int, log *slog.Logger) (*application.ConsumerLimits, error) {
	clock := memory.ClockFunc(time.Now)
	backlog := &benchBacklog{since: clock.Now()}
	return application.NewConsumerLimits(application.ConsumerLimitsConfig{Priority: group,
		Groups: []application.ConsumerLimitGroup{{Group: group, Budget: budget, Floor: 2, Batch: batch}}},
		bootstrap.NewDatabaseSignals(store), backlog, alwaysUp{}, clock, log.With("component", "consumer-limits"))
}

// benchBacklog is the bench's backlog: the oldest unresolved message is
// as old as the run (everything was published first).
type benchBacklog struct{ since time.Time }

// State implements application.BacklogMeasure.
func (b *benchBacklog) State() application.BacklogState {
	return application.BacklogState{OldestUnresolvedAt: b.since, MeasuredAt: time.Now(), Interval: time.Second}
}

// Measure implements application.BacklogMeasure.
func (b *benchBacklog) Measure(context.Context) error { return nil }

// alwaysUp is a broker that never went down (no recovery to ramp after).
type alwaysUp struct{}

// BrokerAvailable implements ports.BrokerHealth.
func (alwaysUp) BrokerAvailable() (bool, time.Time) { return true, time.Time{} }

// btoi is 1 for true.
func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
