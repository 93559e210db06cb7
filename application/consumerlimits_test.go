package application

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/application/concurrency"
	"github.com/seckill-dev/seckill/ports"
)

// limitsClock is a clock the test moves.
type limitsClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *limitsClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *limitsClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// memDatabase is DatabaseSignals in memory.
type memDatabase struct {
	mu      sync.Mutex
	pool    PoolCounters
	locks   int
	lockErr error
	counts  int // LockWaits calls
}

func (d *memDatabase) Pool() PoolCounters { d.mu.Lock(); defer d.mu.Unlock(); return d.pool }
func (d *memDatabase) LockWaits(ctx context.Context) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.counts++
	if _, ok := ctx.Deadline(); !ok {
		return 0, errors.New("lock-wait count without a deadline")
	}
	return d.locks, d.lockErr
}

// memBacklog is BacklogMeasure in memory: Measure stores next.
type memBacklog struct {
	mu       sync.Mutex
	state    BacklogState
	next     BacklogState
	measures int
}

func (b *memBacklog) State() BacklogState { b.mu.Lock(); defer b.mu.Unlock(); return b.state }
func (b *memBacklog) Measure(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.measures++
	b.state = b.next
	return nil
}

// memBroker is ports.BrokerHealth in memory.
type memBroker struct {
	mu   sync.Mutex
	down bool
}

func (b *memBroker) BrokerAvailable() (bool, time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.down, time.Time{}
}

type limitsFixture struct {
	clock   *limitsClock
	db      *memDatabase
	backlog *memBacklog
	broker  *memBroker
	limits  *ConsumerLimits
}

func newLimitsFixture(t *testing.T) *limitsFixture {
	t.Helper()
	f := &limitsFixture{clock: &limitsClock{now: time.Unix(1_800_000_000, 0)}, db: &memDatabase{pool: PoolCounters{Max: 16}},
		backlog: &memBacklog{}, broker: &memBroker{}}
	f.gate(0)
	l, err := NewConsumerLimits(ConsumerLimitsConfig{Priority: "create", Tick: time.Second, Groups: []ConsumerLimitGroup{
		{Group: "create", Budget: 10, Floor: 2, Batch: 32},
		{Group: "audit", Budget: 4, Floor: 2, Batch: 16},
	}}, f.db, f.backlog, f.broker, f.clock, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	f.limits = l
	return f
}

// gate sets a fresh gate measurement with the oldest unresolved
// reservation lag old (none when 0).
func (f *limitsFixture) gate(lag time.Duration) {
	now := f.clock.Now()
	st := BacklogState{MeasuredAt: now, Interval: 250 * time.Millisecond, Ratio: 0.5}
	if lag > 0 {
		st.OldestUnresolvedAt = now.Add(-lag)
	}
	f.backlog.mu.Lock()
	f.backlog.state, f.backlog.next = st, st
	f.backlog.mu.Unlock()
}

// busy reports n batches of size messages at the group's current limit
// (the limit binds), each taking latency.
func (f *limitsFixture) busy(group string, n, size int, latency time.Duration) {
	l := f.limits.Limit(group)
	for range n {
		l.Observe(ports.BatchSample{Messages: size, Duration: latency, InFlight: l.Limit()})
	}
}

func (f *limitsFixture) tick(t *testing.T) map[string]concurrency.Decision {
	t.Helper()
	f.clock.add(time.Second)
	return f.limits.Tick(context.Background())
}

func (f *limitsFixture) limit(group string) int { return f.limits.Limit(group).Limit() }

// TestConsumerLimitsShrinkOnLockWaitsAndGrowBackOnLag: lock waits shrink
// every group; with them gone and the order-create backlog old, the
// order-create limit grows back to its budget, the audit group grows only
// while its batches come full.
func TestConsumerLimitsShrinkOnLockWaitsAndGrowBackOnLag(t *testing.T) {
	f := newLimitsFixture(t)
	if f.limit("create") != 10 || f.limit("audit") != 4 {
		t.Fatalf("start limits %d, %d, want the budgets 10, 4", f.limit("create"), f.limit("audit"))
	}
	if f.limits.Limit("unknown") != nil {
		t.Fatal("a group not under the limiter has a limit")
	}
	// Each shrink is a probe: the ticks after it hold (reason
	// throughput) while the committed messages are measured; they keep,
	// so the shrink stands and the next one follows.
	f.db.locks = 3
	ticks := 0
	for f.limit("create") > 2 || f.limit("audit") > 2 {
		if ticks++; ticks > 3*(concurrency.DefaultProbeTicks+1) {
			t.Fatalf("after %d ticks with 3 lock waits: limits %d, %d; want the floor 2 (10 -> 7 -> 4 -> 2) for both",
				ticks-1, f.limit("create"), f.limit("audit"))
		}
		f.busy("create", 5, 1, 5*time.Millisecond)
		d := f.tick(t)
		for _, g := range []string{"create", "audit"} {
			if r := d[g].Reason; r != concurrency.ReasonLockWaits && r != concurrency.ReasonThroughput {
				t.Fatalf("with 3 lock waits: %s %+v, want lock_waits or throughput", g, d[g])
			}
		}
	}
	f.db.locks = 0
	for i := range 5 {
		f.gate(5 * time.Second)
		f.busy("create", 5, 1, 5*time.Millisecond)
		if i < 1 {
			f.busy("audit", 1, 16, 5*time.Millisecond) // a full batch: messages waited
		}
		d := f.tick(t)
		if d["create"].Action != concurrency.ActionGrow {
			t.Fatalf("tick %d, lag 5s and healthy: %+v", i, d["create"])
		}
		if want := map[bool]concurrency.Action{true: concurrency.ActionGrow, false: concurrency.ActionHold}[i < 1]; d["audit"].Action != want {
			t.Fatalf("tick %d: audit %+v, want %s", i, d["audit"], want)
		}
	}
	if f.limit("create") != 10 || f.limit("audit") != 4 {
		t.Fatalf("after the lag: %d, %d, want 10 (2 + 2 per tick), 4", f.limit("create"), f.limit("audit"))
	}
	st := f.limits.States()
	if st[0].Group != "create" || st[0].Last.Reason != concurrency.ReasonLagHigh || st[0].Decisions[concurrency.ReasonLockWaits] != 3 {
		t.Fatalf("states %+v", st)
	}
	if f.db.counts != ticks+5 {
		t.Fatalf("lock waits counted %d times in %d ticks, want once per tick", f.db.counts, ticks+5)
	}
}

// TestConsumerLimitsReadThePool: waits on a pool still opening its
// connections are no pressure; on a full pool an acquire that waited
// makes the pool exhausted.
func TestConsumerLimitsReadThePool(t *testing.T) {
	f := newLimitsFixture(t)
	f.db.pool = PoolCounters{Acquires: 100, EmptyAcquires: 10, EmptyAcquireWait: time.Second, Total: 8, Max: 16}
	d := f.tick(t)
	if d["create"].Pressure != "" {
		t.Fatalf("10 ms mean wait on a pool opening connections: %+v, want no pressure", d["create"])
	}
	f.db.pool = PoolCounters{Acquires: 200, EmptyAcquires: 11, EmptyAcquireWait: time.Second + time.Millisecond, Total: 16, Max: 16}
	f.gate(5 * time.Second)
	d = f.tick(t)
	if d["create"].Action != concurrency.ActionShrinkPool || d["create"].Reason != concurrency.ReasonPoolExhausted {
		t.Fatalf("an acquire waited on the full pool: %+v", d["create"])
	}
	d = f.tick(t) // counters unchanged: nothing waited this tick
	if d["create"].Pressure != "" {
		t.Fatalf("no acquire this tick: %+v", d["create"])
	}
}

// TestConsumerLimitsRampAfterTheBrokerRecovers: once the publisher's
// breaker reports the broker back, a lag that jumps ramps from the floor,
// one step per binding tick.
func TestConsumerLimitsRampAfterTheBrokerRecovers(t *testing.T) {
	f := newLimitsFixture(t)
	f.broker.down = true
	f.tick(t)
	f.broker.down = false
	f.gate(5 * time.Second)
	d := f.tick(t)
	if d["create"].Action != concurrency.ActionRampUp || f.limit("create") != 2 {
		t.Fatalf("first tick after the recovery: %+v, limit %d, want ramp from the floor 2", d["create"], f.limit("create"))
	}
	f.gate(6 * time.Second)
	f.busy("create", 3, 32, 5*time.Millisecond)
	d = f.tick(t)
	if d["create"].Action != concurrency.ActionRampUp || f.limit("create") != 3 {
		t.Fatalf("second tick: %+v, limit %d, want 3", d["create"], f.limit("create"))
	}
}

// TestConsumerLimitsMeasureAStaleBacklog: without a fresh gate
// measurement (no gate loop on a workers-only instance) a tick measures
// the backlog itself; a failed lock-wait count is no lock wait.
func TestConsumerLimitsMeasureAStaleBacklog(t *testing.T) {
	f := newLimitsFixture(t)
	f.clock.add(10 * time.Second) // the gate's measurement is now stale
	now := f.clock.Now().Add(time.Second)
	f.backlog.next = BacklogState{MeasuredAt: now, OldestUnresolvedAt: now.Add(-3 * time.Second), Interval: 250 * time.Millisecond}
	f.db.lockErr = errors.New("timeout")
	f.db.locks = 5
	d := f.tick(t)
	if f.backlog.measures != 1 {
		t.Fatalf("backlog measured %d times, want 1", f.backlog.measures)
	}
	if d["create"].Reason != concurrency.ReasonLagHigh {
		t.Fatalf("lag 3s from the tick's measurement, lock count failed: %+v", d["create"])
	}
}

// TestConsumerLimitsRunStopsWithItsContext: Run returns nil once its
// context ends.
func TestConsumerLimitsRunStopsWithItsContext(t *testing.T) {
	f := newLimitsFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.limits.Run(ctx) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of its context's end")
	}
}

// TestConsumerLimitsValidate: a priority group missing from the groups,
// a group twice or a nil dependency is refused.
func TestConsumerLimitsValidate(t *testing.T) {
	f := newLimitsFixture(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for name, cfg := range map[string]ConsumerLimitsConfig{
		"no priority": {Priority: "x", Groups: []ConsumerLimitGroup{{Group: "a", Budget: 2}}},
		"twice":       {Priority: "a", Groups: []ConsumerLimitGroup{{Group: "a", Budget: 2}, {Group: "a", Budget: 2}}},
	} {
		if _, err := NewConsumerLimits(cfg, f.db, f.backlog, f.broker, f.clock, log); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := NewConsumerLimits(ConsumerLimitsConfig{Priority: "a", Groups: []ConsumerLimitGroup{{Group: "a", Budget: 2}}},
		nil, f.backlog, f.broker, f.clock, log); err == nil {
		t.Error("nil database: no error")
	}
}

// memPeers is ports.ConsumerPeers in memory on the test's clock.
type memPeers struct {
	mu    sync.Mutex
	clock *limitsClock
	seen  map[string]time.Time
	err   error
}

func (p *memPeers) Heartbeat(_ context.Context, instance string, ttl time.Duration) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return 0, p.err
	}
	now := p.clock.Now()
	p.seen[instance] = now
	for id, at := range p.seen {
		if now.Sub(at) > ttl {
			delete(p.seen, id)
		}
	}
	return len(p.seen), nil
}

func (p *memPeers) Leave(_ context.Context, instance string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.seen, instance)
	return p.err
}

// ceilings returns each group's ceiling.
func ceilings(c *ConsumerLimits) map[string]int {
	out := map[string]int{}
	for _, st := range c.States() {
		out[st.Group] = st.Ceiling
	}
	return out
}

// TestConsumerLimitsShareOneGlobalBudget: with a global budget of one
// instance's budgets (14 = 10 + 4), an instance alone uses them in full;
// a second instance halves both instances' ceilings (never below a
// floor) at their next tick; a failed heartbeat keeps the share; when one
// leaves, the other takes the whole budget back at its next tick, and
// after a crash (no leave) once the crashed one's heartbeat is older than
// three ticks.
func TestConsumerLimitsShareOneGlobalBudget(t *testing.T) {
	f := newLimitsFixture(t)
	peers := &memPeers{clock: f.clock, seen: map[string]time.Time{}}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	instance := func(name string) *ConsumerLimits {
		l, err := NewConsumerLimits(ConsumerLimitsConfig{Priority: "create", Tick: time.Second, Groups: []ConsumerLimitGroup{
			{Group: "create", Budget: 10, Floor: 2, Batch: 32},
			{Group: "audit", Budget: 4, Floor: 2, Batch: 16},
		}, GlobalBudget: 14, Instance: name, Peers: peers}, f.db, f.backlog, f.broker, f.clock, log)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	ctx := context.Background()
	tick := func(ls ...*ConsumerLimits) {
		f.clock.add(time.Second)
		f.gate(0)
		for _, l := range ls {
			l.Tick(ctx)
		}
	}
	want := func(l *ConsumerLimits, live int, share float64, create, audit int) {
		t.Helper()
		gotLive, gotShare := l.Share()
		c := ceilings(l)
		if gotLive != live || gotShare != share || c["create"] != create || c["audit"] != audit {
			t.Fatalf("live %d share %v ceilings %v; want live %d share %v create %d audit %d",
				gotLive, gotShare, c, live, share, create, audit)
		}
		if got := l.Limit("create").Limit(); got > create {
			t.Fatalf("create limit %d above its ceiling %d", got, create)
		}
	}
	a := instance("a")
	tick(a)
	want(a, 1, 1, 10, 4)
	b := instance("b")
	tick(b, a)
	want(a, 2, 0.5, 5, 2)
	want(b, 2, 0.5, 5, 2)

	peers.err = errors.New("registry down")
	tick(a)
	want(a, 2, 0.5, 5, 2)
	peers.err = nil

	b.leave(ctx)
	tick(a)
	want(a, 1, 1, 10, 4)

	// b comes back and crashes: a counts it until its heartbeat is older
	// than three ticks.
	tick(b, a)
	want(a, 2, 0.5, 5, 2)
	tick(a)
	tick(a)
	tick(a)
	want(a, 2, 0.5, 5, 2)
	tick(a)
	want(a, 1, 1, 10, 4)
}

// TestConsumerLimitsGlobalBudgetNeedsPeers: a global budget without the
// registry or the instance's name, or a negative one, is refused.
func TestConsumerLimitsGlobalBudgetNeedsPeers(t *testing.T) {
	f := newLimitsFixture(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	groups := []ConsumerLimitGroup{{Group: "a", Budget: 2}}
	peers := &memPeers{clock: f.clock, seen: map[string]time.Time{}}
	for name, cfg := range map[string]ConsumerLimitsConfig{
		"no peers":    {Priority: "a", Groups: groups, GlobalBudget: 4, Instance: "x"},
		"no instance": {Priority: "a", Groups: groups, GlobalBudget: 4, Peers: peers},
		"negative":    {Priority: "a", Groups: groups, GlobalBudget: -1, Instance: "x", Peers: peers},
	} {
		if _, err := NewConsumerLimits(cfg, f.db, f.backlog, f.broker, f.clock, log); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestConsumerLimitsRunJoinsAndLeaves: with a global budget, Run
// heartbeats before its first tick (another live instance halves the
// share at once) and leaves the registry when its context ends.
func TestConsumerLimitsRunJoinsAndLeaves(t *testing.T) {
	f := newLimitsFixture(t)
	peers := &memPeers{clock: f.clock, seen: map[string]time.Time{"other": f.clock.Now()}}
	l, err := NewConsumerLimits(ConsumerLimitsConfig{Priority: "create", Tick: time.Hour, Groups: []ConsumerLimitGroup{
		{Group: "create", Budget: 10, Floor: 2, Batch: 32},
	}, GlobalBudget: 10, Instance: "me", Peers: peers}, f.db, f.backlog, f.broker, f.clock,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for live, _ := l.Share(); live != 2; live, _ = l.Share() {
		if time.Now().After(deadline) {
			t.Fatal("Run did not heartbeat within 10s")
		}
		time.Sleep(time.Millisecond)
	}
	if got := l.Limit("create").Limit(); got != 5 {
		t.Fatalf("create limit %d with two live instances, want 5", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	peers.mu.Lock()
	defer peers.mu.Unlock()
	if _, ok := peers.seen["me"]; ok {
		t.Fatal("the instance is still in the registry after Run returned")
	}
}

// TestConsumerLimitsLendTheBudgetNearTheDeadline: the order-create
// group's deadline is the backlog gate's (its oldest unresolved
// reservation at the gate's ratio of the shortest TTL of the SKUs holding
// one). Within 10 s of it the other groups yield their budget to
// order-create (its runner's hard cap, Highest, allows the borrowed
// calls) and get it back once the backlog is young again; an old backlog
// far from its deadline lends nothing.
func TestConsumerLimitsLendTheBudgetNearTheDeadline(t *testing.T) {
	f := newLimitsFixture(t)
	if f.limits.Highest("create") != 12 || f.limits.Highest("audit") != 4 || f.limits.Highest("unknown") != 0 {
		t.Fatalf("Highest create/audit/unknown = %d/%d/%d; want 10+(4-2) = 12, 4, 0",
			f.limits.Highest("create"), f.limits.Highest("audit"), f.limits.Highest("unknown"))
	}
	aged := func(age time.Duration) {
		f.gate(age)
		f.backlog.mu.Lock()
		f.backlog.state.ShortestTTL, f.backlog.next.ShortestTTL = time.Minute, time.Minute // deadline at 0.5 x 1 min = 30 s of age
		f.backlog.mu.Unlock()
	}
	tick := func() map[string]concurrency.Decision {
		f.busy("create", 5, 1, 5*time.Millisecond)
		f.busy("audit", 1, 16, 5*time.Millisecond)
		return f.tick(t)
	}
	aged(5 * time.Second) // 25 s from its deadline
	if d := tick(); d["create"].Urgent || ceilings(f.limits)["create"] != 10 || ceilings(f.limits)["audit"] != 4 {
		t.Fatalf("far from the deadline: %+v, ceilings %v; want 10 and 4", d["create"], ceilings(f.limits))
	}
	aged(25 * time.Second) // 5 s from it
	if d := tick(); !d["create"].Urgent || ceilings(f.limits)["create"] != 12 || ceilings(f.limits)["audit"] != 2 {
		t.Fatalf("near the deadline: %+v, ceilings %v; want create 12, audit at its floor 2", d["create"], ceilings(f.limits))
	}
	if f.limit("audit") != 2 {
		t.Fatalf("audit limit %d near the deadline, want its floor 2", f.limit("audit"))
	}
	tick()
	if f.limit("create") != 12 {
		t.Fatalf("create limit %d while urgent with a backlog, want the borrowed 12", f.limit("create"))
	}
	aged(0)
	if d := tick(); d["create"].Urgent || ceilings(f.limits)["create"] != 10 || ceilings(f.limits)["audit"] != 4 || f.limit("create") != 10 {
		t.Fatalf("backlog gone: %+v, ceilings %v, create limit %d; want 10 and 4 again", d["create"], ceilings(f.limits), f.limit("create"))
	}
}
