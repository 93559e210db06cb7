package application

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

// BacklogGate is PlaceOrder's admission control (spec 21-22): it closes
// admission, before any stock is touched, when the age of the oldest
// unresolved reservation (reserved, but with neither an order nor a
// release yet: unsent, queued in the broker, or being consumed) exceeds a
// share of the reservation validity. Measurements come from a background
// loop; when they are missing or stale the gate fails closed.
type BacklogGate struct {
	backlog  ports.Backlog
	clock    ports.Clock
	metrics  ports.Metrics
	log      *slog.Logger
	ratio    float64
	interval time.Duration

	oldestMS   atomic.Int64 // unix ms of the oldest unresolved reservation; 0 = none
	ttlMS      atomic.Int64 // the shortest TTL of the SKUs with one, ms; 0 = none
	measuredMS atomic.Int64 // unix ms of the last successful measurement; 0 = never
	unresolved atomic.Int64 // unresolved reservations at the last measurement
}

// NewBacklogGate returns a gate closing at ratio × reservation TTL,
// measuring every interval.
func NewBacklogGate(backlog ports.Backlog, clock ports.Clock, metrics ports.Metrics, log *slog.Logger, ratio float64, interval time.Duration) *BacklogGate {
	return &BacklogGate{backlog: backlog, clock: clock, metrics: metrics, log: log, ratio: ratio, interval: interval}
}

// Measure takes one measurement.
func (g *BacklogGate) Measure(ctx context.Context) error {
	st, err := g.backlog.Stats(ctx)
	if err != nil {
		return fmt.Errorf("measure backlog: %w", err)
	}
	now := g.clock.Now()
	var oldest int64
	var age time.Duration
	if !st.OldestUnresolvedAt.IsZero() {
		oldest = st.OldestUnresolvedAt.UnixMilli()
		age = max(now.Sub(st.OldestUnresolvedAt), 0)
	}
	g.oldestMS.Store(oldest)
	g.ttlMS.Store(st.ShortestUnresolvedTTL.Milliseconds())
	g.unresolved.Store(st.Unresolved)
	g.measuredMS.Store(now.UnixMilli())
	g.metrics.Unresolved(st.Unresolved, age)
	return nil
}

// Run measures every interval until ctx is canceled.
func (g *BacklogGate) Run(ctx context.Context) error {
	t := time.NewTicker(g.interval)
	defer t.Stop()
	for {
		if err := g.Measure(ctx); err != nil && ctx.Err() == nil {
			g.log.WarnContext(ctx, "backlog measurement failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Admit returns ports.ErrBacklog when new reservations with validity ttl
// must be refused at now: the backlog is older than ratio × ttl, or no
// fresh measurement exists (fail closed).
func (g *BacklogGate) Admit(now time.Time, ttl time.Duration) error {
	measured := g.measuredMS.Load()
	if measured == 0 || now.UnixMilli()-measured > (5*g.interval).Milliseconds()+1000 {
		return fmt.Errorf("%w: backlog not measured recently", ports.ErrBacklog)
	}
	oldest := g.oldestMS.Load()
	if oldest == 0 {
		return nil
	}
	age := time.Duration(now.UnixMilli()-oldest) * time.Millisecond
	if float64(age) > g.ratio*float64(ttl) {
		return fmt.Errorf("%w: oldest unresolved reservation is %s old (limit %.0f%% of %s)",
			ports.ErrBacklog, age.Round(time.Millisecond), g.ratio*100, ttl)
	}
	return nil
}

// BacklogState is what a BacklogGate last measured, with its settings.
type BacklogState struct {
	// OldestUnresolvedAt is when the oldest unresolved reservation was
	// made, as of the last measurement; zero when there was none.
	OldestUnresolvedAt time.Time
	// ShortestTTL is the shortest reservation TTL among the activity
	// SKUs that held an unresolved reservation, as of the last
	// measurement; zero when there was none.
	ShortestTTL time.Duration
	// MeasuredAt is when the last successful measurement was taken; zero
	// before the first one.
	MeasuredAt time.Time
	// Unresolved is how many reservations were unresolved at the last
	// measurement (0 before the first one).
	Unresolved int64
	// Ratio is the share of a reservation TTL past which admission closes
	// (SECKILL_BACKLOG_CLOSE_RATIO).
	Ratio float64
	// Interval is the period of the measurements; Admit fails closed once
	// the last one is older than five intervals plus one second.
	Interval time.Duration
}

// Deadline returns when the backlog's oldest unresolved reservation
// reaches Ratio of the shortest TTL among the SKUs holding one: at the
// latest, when the gate closes admission for those SKUs (the oldest of
// all is held against the shortest validity, so the deadline is never
// later than any SKU's own). Zero when no unresolved reservation was
// measured.
func (st BacklogState) Deadline() time.Time {
	if st.OldestUnresolvedAt.IsZero() || st.ShortestTTL <= 0 {
		return time.Time{}
	}
	return st.OldestUnresolvedAt.Add(time.Duration(st.Ratio * float64(st.ShortestTTL)))
}

// State returns the gate's last measurement and its settings. It reads
// what Measure stored and touches no store.
func (g *BacklogGate) State() BacklogState {
	st := BacklogState{Ratio: g.ratio, Interval: g.interval}
	if ms := g.oldestMS.Load(); ms != 0 {
		st.OldestUnresolvedAt = time.UnixMilli(ms)
	}
	st.ShortestTTL = time.Duration(g.ttlMS.Load()) * time.Millisecond
	st.Unresolved = g.unresolved.Load()
	if ms := g.measuredMS.Load(); ms != 0 {
		st.MeasuredAt = time.UnixMilli(ms)
	}
	return st
}
