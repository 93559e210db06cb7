package benchconsume

import (
	"context"
	"errors"
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
	"github.com/seckill-dev/seckill/tools/internal/benchenv"
	"github.com/seckill-dev/seckill/tools/internal/procstat"
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

// consumeResult is what one mode measured: orders created in elapsed,
// the invariants' verdict, and the cores PostgreSQL used meanwhile (its
// CPU seconds over elapsed; negative when they were not read).
type consumeResult struct {
	created int
	elapsed time.Duration
	check   string
	pgCores float64
}

// consumeHeader heads the columns of a mode's name and its
// consumeResult.String.
func consumeHeader() string {
	return fmt.Sprintf("%-32s %10s %12s %10s %8s %s", "mode", "orders", "orders/s", "elapsed", "pg cores", "invariants")
}

// rate is orders created per second.
func (r consumeResult) rate() float64 { return float64(r.created) / r.elapsed.Seconds() }

// String is the result's columns after the mode's name.
func (r consumeResult) String() string {
	return fmt.Sprintf("%10d %12.0f %10s %8s %s", r.created, r.rate(), r.elapsed.Round(time.Millisecond), coresText(r.pgCores), r.check)
}

// postgresMeter reads the CPU of the local stack's PostgreSQL (the
// postmaster and its backends) over one measured mode; a nil meter (the
// stack's pid file unreadable, or a reading failed) reads nothing.
type postgresMeter struct{ m *benchenv.CPUMeter }

// startPostgresMeter starts reading PostgreSQL's CPU; when it cannot, it
// says so in log and returns a meter that reads nothing.
func startPostgresMeter(log *slog.Logger) postgresMeter {
	pg, err := benchenv.StackMeteredProc("postgres", true)
	if err == nil {
		var m *benchenv.CPUMeter
		if m, err = benchenv.StartCPUMeter(pg); err == nil {
			return postgresMeter{m: m}
		}
	}
	log.Warn("PostgreSQL's CPU is not read", "error", err)
	return postgresMeter{}
}

// cores is the cores PostgreSQL used since the start, over wall; -1 when
// not read.
func (p postgresMeter) cores(wall time.Duration, log *slog.Logger) float64 {
	if p.m == nil {
		return -1
	}
	c, err := cpuCores(p.m, wall)
	if err != nil {
		log.Warn("PostgreSQL's CPU is not read", "error", err)
		return -1
	}
	return c
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
		"delay inside each transaction %v, fresh database per mode\n\n", benchenv.BrokerText(cfg), runtime.NumCPU(), base.n, base.batch,
		cfg.Postgres.MaxConns, base.slow)
	fmt.Fprintln(stdout, consumeHeader())
	var best consumeResult
	bestAt := 0
	var largest consumeResult
	for _, c := range levels {
		run := base
		run.concurrency = c
		res, err := consumeMode(ctx, cfg, rc, log, run)
		if err != nil {
			return err
		}
		if res.rate() > best.rate() || bestAt == 0 {
			best, bestAt = res, c
		}
		if c == slices.Max(levels) {
			largest = res
		}
		fmt.Fprintf(stdout, "%-32s %s\n", fmt.Sprintf("fixed concurrency %d", c), res)
	}
	run := base
	run.concurrency, run.adaptive = slices.Max(levels), true
	var notes []string
	run.notes = func(s string) { notes = append(notes, s) }
	res, err := consumeMode(ctx, cfg, rc, log, run)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%-32s %s\n", fmt.Sprintf("adaptive, budget %d", run.concurrency), res)
	for _, n := range notes {
		fmt.Fprintf(stdout, "  %s\n", n)
	}
	fmt.Fprintf(stdout, "\nadaptive: %.2fx the best fixed concurrency (%d: %.0f orders/s, PostgreSQL %s cores), %.2fx fixed %d\n",
		res.rate()/best.rate(), bestAt, best.rate(), coresText(best.pgCores), res.rate()/largest.rate(), run.concurrency)
	return nil
}

// coresText prints cores, "-" when not read (negative).
func coresText(c float64) string {
	if c < 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", c)
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

// cpuCores is the CPU a CPUMeter's first process used since its start,
// in cores: CPU seconds over the wall-clock seconds of wall.
func cpuCores(m *benchenv.CPUMeter, wall time.Duration) (float64, error) {
	if wall <= 0 {
		return 0, errors.New("cpu meter: no time measured")
	}
	now, err := m.Read()
	if err != nil {
		return 0, err
	}
	return float64(now[0]-m.Start[0]) / procstat.ClockTicks / wall.Seconds(), nil
}
