package application

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill-dev/seckill/application/concurrency"
	"github.com/seckill-dev/seckill/ports"
)

// PoolCounters is a snapshot of the database connection pool's counters
// (they only grow; ConsumerLimits takes the difference per tick) and of
// its connections now.
type PoolCounters struct {
	// Acquires counts the successful acquires; EmptyAcquires those that
	// found no idle connection and waited; EmptyAcquireWait is the total
	// time the empty acquires waited.
	Acquires, EmptyAcquires int64
	EmptyAcquireWait        time.Duration
	// Acquired, Total and Max are the connections in use, open, and the
	// pool's size.
	Acquired, Total, Max int32
}

// DatabaseSignals is what ConsumerLimits reads of PostgreSQL at each tick.
type DatabaseSignals interface {
	// Pool returns the pool's counters now, without touching a
	// connection.
	Pool() PoolCounters
	// LockWaits returns the number of sessions of the database waiting on
	// a lock now; it is bounded by ctx.
	LockWaits(ctx context.Context) (int, error)
}

// BacklogMeasure is the order-create backlog as the BacklogGate measures
// it: State reads the last measurement, Measure takes a new one.
type BacklogMeasure interface {
	State() BacklogState
	Measure(ctx context.Context) error
}

// ConsumerLimitGroup is one business consumer group under the adaptive
// limiter.
type ConsumerLimitGroup struct {
	// Group names the group (the group label of the metrics).
	Group string
	// Budget is the group's configured concurrency, the highest limit;
	// Floor the lowest (at most Budget: a lower Budget is the floor).
	Budget, Floor int
	// Batch is the group's largest batch. A group without a lag
	// measurement (every group but the priority one) reads a full batch
	// during a tick as lag high: messages were waiting.
	Batch int
}

// ConsumerLimitsConfig configures ConsumerLimits.
type ConsumerLimitsConfig struct {
	// Priority is the group whose lag is the order-create backlog and
	// that the others yield to (concurrency.Budget). Required, one of
	// the groups.
	Priority string
	// Groups are the business groups, Priority among them.
	Groups []ConsumerLimitGroup
	// Tick is the period of the decisions. Zero means 1 s.
	Tick time.Duration
	// LockWaitTimeout bounds the one lock-wait count of a tick. Zero
	// means 200 ms, and it is never above half the tick.
	LockWaitTimeout time.Duration
	// Policy holds the decision table's thresholds (zero: the defaults).
	Policy concurrency.Policy
	// GlobalBudget is the concurrency all instances together may use,
	// summed over every group (spec 22.1); zero means each instance uses
	// its own groups' budgets in full. When set, each tick heartbeats
	// Instance into Peers and scales every group's ceiling by this
	// instance's share, min(1, GlobalBudget / (live instances x the sum
	// of this instance's budgets)); a failed heartbeat keeps the last
	// share.
	GlobalBudget int
	// Instance names this instance in Peers; required with GlobalBudget.
	Instance string
	// Peers is the registry of live instances; required with
	// GlobalBudget.
	Peers ports.ConsumerPeers
}

// ConsumerLimits runs the adaptive concurrency limiters of the business
// consumer groups (spec 22, issue 29): one concurrency.Limiter per group,
// shared through one concurrency.Budget in which the priority group
// (order-create) has priority. Limit gives each group's runner its
// ports.ConcurrencyLimit; Run ticks every limiter once per tick with the
// signals it gathers:
//
//   - lag: for the priority group, the age of the oldest unresolved
//     reservation as the BacklogGate measured it (measured here when the
//     gate's own measurement is stale: a workers-only instance runs no
//     gate loop), and its trend; for the other groups, which the service
//     does not measure, lag high when a full batch was observed during
//     the tick (messages waited), else zero;
//   - the pool: when every connection is open (a wait on a pool still
//     opening connections is the opening, not pressure), the mean wait
//     per acquire over the tick, and exhausted when acquires waited;
//   - lock waits: one count of the database's sessions waiting on a lock,
//     bounded by LockWaitTimeout (a failed count is zero);
//   - the broker's recovery: when the publisher's breaker
//     (ports.BrokerHealth) reports the broker available again after it
//     was not, that moment is the recovery the limiters ramp after.
//
// The latency, error and in-flight signals come from the batches the
// runners report. The signals are process-wide, the same for every group.
// The priority group's reservation deadline is the backlog's
// (BacklogState.Deadline: its oldest unresolved reservation at the gate's
// ratio of the shortest TTL among the SKUs holding one); within the
// policy's HeadroomLow of it the group is urgent and the other groups
// yield their budget to it (concurrency.Budget) until it is not.
//
// It is safe for concurrent use; Run is its only goroutine.
type ConsumerLimits struct {
	cfg     ConsumerLimitsConfig
	budget  *concurrency.Budget
	groups  map[string]*groupLimit
	db      DatabaseSignals
	backlog BacklogMeasure
	broker  ports.BrokerHealth
	clock   ports.Clock
	log     *slog.Logger

	mu          sync.Mutex // held by a tick
	prevPool    PoolCounters
	prevLag     time.Duration
	prevAt      time.Time
	brokerDown  bool
	recoveredAt time.Time
	live        int     // instances sharing the budget at the last heartbeat (0: not shared or not yet known)
	share       float64 // this instance's part of its budgets, 1 when not shared
}

// groupLimit is one group's limiter as its runner sees it: it notes a
// full batch for the lag of a group without a lag measurement.
type groupLimit struct {
	*concurrency.Limiter
	batch int
	full  atomic.Bool
}

// Observe notes a full batch and passes the sample on.
func (g *groupLimit) Observe(s ports.BatchSample) {
	if g.batch > 0 && s.Messages >= g.batch {
		g.full.Store(true)
	}
	g.Limiter.Observe(s)
}

// NewConsumerLimits validates cfg and builds the limiters, each at its
// group's Budget (today's fixed concurrency: the limiters only take away
// what PostgreSQL cannot carry).
func NewConsumerLimits(cfg ConsumerLimitsConfig, db DatabaseSignals, backlog BacklogMeasure, broker ports.BrokerHealth,
	clock ports.Clock, log *slog.Logger) (*ConsumerLimits, error) {
	if cfg.Tick <= 0 {
		cfg.Tick = time.Second
	}
	if cfg.LockWaitTimeout <= 0 {
		cfg.LockWaitTimeout = 200 * time.Millisecond
	}
	cfg.LockWaitTimeout = min(cfg.LockWaitTimeout, cfg.Tick/2)
	if db == nil || backlog == nil || broker == nil || clock == nil || log == nil {
		return nil, errors.New("consumer limits: nil dependency")
	}
	switch {
	case cfg.GlobalBudget < 0:
		return nil, fmt.Errorf("consumer limits: global budget %d must be >= 0", cfg.GlobalBudget)
	case cfg.GlobalBudget > 0 && (cfg.Peers == nil || cfg.Instance == ""):
		return nil, errors.New("consumer limits: a global budget needs the peers registry and this instance's name")
	}
	c := &ConsumerLimits{cfg: cfg, groups: map[string]*groupLimit{}, db: db, backlog: backlog, broker: broker,
		clock: clock, log: log, share: 1}
	var priority *concurrency.Limiter
	var others []*concurrency.Limiter
	for _, g := range cfg.Groups {
		l, err := concurrency.NewLimiter(concurrency.Config{Group: g.Group, Budget: g.Budget,
			Floor: min(max(g.Floor, 1), g.Budget), Policy: cfg.Policy}, clock)
		if err != nil {
			return nil, fmt.Errorf("consumer limits: %w", err)
		}
		if _, dup := c.groups[g.Group]; dup {
			return nil, fmt.Errorf("consumer limits: group %s twice", g.Group)
		}
		c.groups[g.Group] = &groupLimit{Limiter: l, batch: g.Batch}
		if g.Group == cfg.Priority {
			priority = l
		} else {
			others = append(others, l)
		}
	}
	if priority == nil {
		return nil, fmt.Errorf("consumer limits: priority group %q is not among the groups", cfg.Priority)
	}
	b, err := concurrency.NewBudget(priority, others...)
	if err != nil {
		return nil, fmt.Errorf("consumer limits: %w", err)
	}
	c.budget = b
	c.prevPool = db.Pool()
	return c, nil
}

// Limit returns group's limit for its runner, or nil when the group is
// not under the limiter (its runner then keeps its fixed concurrency).
func (c *ConsumerLimits) Limit(group string) ports.ConcurrencyLimit {
	if g, ok := c.groups[group]; ok {
		return g
	}
	return nil
}

// Highest returns the highest limit group can be given
// (concurrency.Budget.Highest): the priority group's runner needs it as
// its hard cap for the budget the others yield while it is urgent; 0 for
// a group not under the limiter.
func (c *ConsumerLimits) Highest(group string) int { return c.budget.Highest(group) }

// States returns every group's limit and last decision, the priority
// group first.
func (c *ConsumerLimits) States() []concurrency.State { return c.budget.States() }

// Share returns the number of live instances sharing the global budget
// at the last heartbeat (0 when the budget is not shared or no heartbeat
// succeeded yet) and this instance's share of its own budgets (1 when not
// shared).
func (c *ConsumerLimits) Share() (live int, share float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.live, c.share
}

// Run ticks the limiters every tick until ctx ends; it returns nil then.
// With a global budget it heartbeats before the first tick (so a new
// instance takes only its share from the start) and leaves the registry
// when ctx ends.
func (c *ConsumerLimits) Run(ctx context.Context) error {
	if c.cfg.GlobalBudget > 0 {
		c.mu.Lock()
		c.heartbeat(ctx)
		c.mu.Unlock()
		defer c.leave(ctx)
	}
	t := time.NewTicker(c.cfg.Tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		c.Tick(ctx)
	}
}

// heartbeat records this instance in the registry and sets its share of
// the global budget from the live count; c.mu is held. A failed heartbeat
// keeps the last share.
func (c *ConsumerLimits) heartbeat(ctx context.Context) {
	hctx, cancel := context.WithTimeout(ctx, c.cfg.LockWaitTimeout)
	live, err := c.cfg.Peers.Heartbeat(hctx, c.cfg.Instance, 3*c.cfg.Tick)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			c.log.WarnContext(ctx, "consumer heartbeat failed; the budget share stays", "share", c.share, "error", err)
		}
		return
	}
	live = max(live, 1)
	share := min(1, float64(c.cfg.GlobalBudget)/float64(live*c.budget.Total()))
	if live != c.live || share != c.share {
		c.log.InfoContext(ctx, "consumer budget share", "live_instances", live, "share", share,
			"global_budget", c.cfg.GlobalBudget)
	}
	c.live, c.share = live, share
	c.budget.SetShare(share)
}

// leave removes this instance from the registry once ctx has ended,
// within LockWaitTimeout.
func (c *ConsumerLimits) leave(ctx context.Context) {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.LockWaitTimeout)
	defer cancel()
	if err := c.cfg.Peers.Leave(lctx, c.cfg.Instance); err != nil {
		c.log.WarnContext(lctx, "leaving the consumer registry failed; the others take this share after its ttl", "error", err)
	}
}

// Tick gathers the signals once and ticks every limiter with them; it
// returns the decisions by group.
func (c *ConsumerLimits) Tick(ctx context.Context) map[string]concurrency.Decision {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	if c.cfg.GlobalBudget > 0 {
		c.heartbeat(ctx)
	}
	common := c.database(ctx)
	common.BrokerRecoveredAt = c.brokerRecovery(now)
	signals := make(map[string]concurrency.Signals, len(c.groups))
	for name, g := range c.groups {
		s := common
		full := g.full.Swap(false)
		if name == c.cfg.Priority {
			s.Lag, s.LagTrend, s.ReservationDeadline = c.priorityLag(ctx, now)
		} else if full {
			s.Lag = c.lagHigh()
		}
		signals[name] = s
	}
	decisions := c.budget.Tick(signals)
	for name, d := range decisions {
		if d.Step == concurrency.StepShrink || d.Step == concurrency.StepRamp {
			c.log.DebugContext(ctx, "consumer concurrency limit moved", "consumer_group", name,
				"action", string(d.Action), "reason", string(d.Reason), "limit", c.groups[name].Limit())
		}
	}
	return decisions
}

// lagHigh is the lag reported for a group whose batches came full.
func (c *ConsumerLimits) lagHigh() time.Duration {
	if c.cfg.Policy.LagHigh > 0 {
		return c.cfg.Policy.LagHigh
	}
	return concurrency.DefaultPolicy().LagHigh
}

// database reads the pool's counters and the lock waits; c.mu is held.
func (c *ConsumerLimits) database(ctx context.Context) concurrency.Signals {
	var s concurrency.Signals
	p := c.db.Pool()
	acquires := p.Acquires - c.prevPool.Acquires
	empty := p.EmptyAcquires - c.prevPool.EmptyAcquires
	wait := p.EmptyAcquireWait - c.prevPool.EmptyAcquireWait
	// An empty acquire on a pool not yet at its size only waited for a
	// new connection (the pool opening, not pressure); on a full pool it
	// waited for another acquire to end.
	full := p.Max > 0 && p.Total >= p.Max
	if full && acquires > 0 && wait > 0 {
		s.PoolWait = wait / time.Duration(acquires)
	}
	s.PoolExhausted = full && empty > 0
	c.prevPool = p
	lctx, cancel := context.WithTimeout(ctx, c.cfg.LockWaitTimeout)
	n, err := c.db.LockWaits(lctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			c.log.DebugContext(ctx, "lock waits not counted this tick", "error", err)
		}
		n = 0
	}
	s.LockWaits = n
	return s
}

// brokerRecovery follows the publisher's breaker and returns the last
// time it saw the broker come back; c.mu is held.
func (c *ConsumerLimits) brokerRecovery(now time.Time) time.Time {
	ok, _ := c.broker.BrokerAvailable()
	if !ok {
		c.brokerDown = true
	} else if c.brokerDown {
		c.brokerDown = false
		c.recoveredAt = now
	}
	return c.recoveredAt
}

// priorityLag returns the age of the oldest unresolved reservation, its
// trend in seconds per second and the backlog's deadline
// (BacklogState.Deadline; zero when unknown); c.mu is held. A gate
// measurement older than two of its intervals plus a tick is taken again
// here.
func (c *ConsumerLimits) priorityLag(ctx context.Context, now time.Time) (time.Duration, float64, time.Time) {
	st := c.backlog.State()
	if st.MeasuredAt.IsZero() || now.Sub(st.MeasuredAt) > 2*st.Interval+c.cfg.Tick {
		mctx, cancel := context.WithTimeout(ctx, c.cfg.LockWaitTimeout)
		err := c.backlog.Measure(mctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				c.log.DebugContext(ctx, "backlog not measured this tick", "error", err)
			}
			return c.prevLag, 0, time.Time{}
		}
		st = c.backlog.State()
	}
	var lag time.Duration
	if !st.OldestUnresolvedAt.IsZero() {
		lag = max(now.Sub(st.OldestUnresolvedAt), 0)
	}
	var trend float64
	if !c.prevAt.IsZero() {
		if dt := now.Sub(c.prevAt).Seconds(); dt > 0 {
			trend = (lag - c.prevLag).Seconds() / dt
		}
	}
	c.prevLag, c.prevAt = lag, now
	return lag, trend, st.Deadline()
}
