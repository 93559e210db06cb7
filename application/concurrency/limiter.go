package concurrency

import (
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

// Defaults of Config.
const (
	DefaultGrowStep    = 2
	DefaultRampStep    = 1
	DefaultBackoff     = 0.7
	DefaultFloorWindow = 60
	DefaultProbeTicks  = 3
	DefaultProbeHold   = 30
	// probeKeep is the part of the throughput before a soft shrink that
	// the throughput after it must keep for the shrink to stand.
	probeKeep = 0.9
	// upKeep is the part of an upward probe's relative growth that the
	// throughput must gain for the growth to stay (growing from 2 to 4,
	// at least 1.5x the throughput before).
	upKeep = 0.5
)

// sizeBuckets is the number of batch-size classes the latency floor is
// kept for: 1, 2-3, 4-7, 8-15, 16 and more messages.
const sizeBuckets = 5

// Config configures one group's Limiter.
type Config struct {
	// Group names the consumer group (the group label of the metrics).
	Group string
	// Floor is the lowest limit, at least 1. Zero means 1.
	Floor int
	// Budget is the highest limit the group has of its own (its share of
	// the pool's consumer budget); a Budget may raise the ceiling of its
	// priority group above it with what the other groups yield. Required,
	// >= Floor.
	Budget int
	// Initial is the limit before the first tick. Zero means Budget
	// (today's fixed concurrency: the limiter only takes away what
	// PostgreSQL cannot carry). To ramp up at start, tick with
	// Signals.BrokerRecoveredAt set to the start time.
	Initial int
	// GrowStep is the additive increase per tick while lag is high and
	// PostgreSQL healthy. Zero means DefaultGrowStep.
	GrowStep int
	// RampStep is the increase per tick while ramping up after a broker
	// recovery (from the floor). Zero means DefaultRampStep.
	RampStep int
	// Backoff is the multiplicative decrease, in (0, 1): a shrink sets the
	// limit to Backoff × limit (at least one less, never below Floor).
	// Zero means DefaultBackoff.
	Backoff float64
	// FloorWindow is the number of ticks the latency floor is the minimum
	// of. Zero means DefaultFloorWindow.
	FloorWindow int
	// ProbeTicks is how many ticks the throughput after a soft shrink is
	// measured over before the shrink stands or is undone; ProbeHold how
	// many ticks soft shrinks are held after one was undone. Zero means
	// DefaultProbeTicks and DefaultProbeHold.
	ProbeTicks, ProbeHold int
	// Policy holds the thresholds of the decision table.
	Policy Policy
}

func (c Config) withDefaults() Config {
	if c.Floor <= 0 {
		c.Floor = 1
	}
	if c.Initial <= 0 {
		c.Initial = c.Budget
	}
	if c.GrowStep <= 0 {
		c.GrowStep = DefaultGrowStep
	}
	if c.RampStep <= 0 {
		c.RampStep = DefaultRampStep
	}
	if c.Backoff <= 0 {
		c.Backoff = DefaultBackoff
	}
	if c.FloorWindow <= 0 {
		c.FloorWindow = DefaultFloorWindow
	}
	if c.ProbeTicks <= 0 {
		c.ProbeTicks = DefaultProbeTicks
	}
	if c.ProbeHold <= 0 {
		c.ProbeHold = DefaultProbeHold
	}
	c.Policy = c.Policy.withDefaults()
	return c
}

func (c Config) validate() error {
	switch {
	case c.Group == "":
		return errors.New("limiter config: empty Group")
	case c.Budget < c.Floor:
		return fmt.Errorf("limiter config %s: Budget %d below Floor %d", c.Group, c.Budget, c.Floor)
	case c.Initial < c.Floor || c.Initial > c.Budget:
		return fmt.Errorf("limiter config %s: Initial %d outside [%d, %d]", c.Group, c.Initial, c.Floor, c.Budget)
	case c.Backoff >= 1:
		return fmt.Errorf("limiter config %s: Backoff %v not below 1", c.Group, c.Backoff)
	}
	return nil
}

// Limiter is one consumer group's adaptive concurrency limit, an AIMD
// limiter steered by the decision table (see the package documentation).
// It implements ports.ConcurrencyLimit: the runner reads Limit and reports
// each batch with Observe; the caller calls Tick once per interval with
// the external signals. It starts no goroutine and reads time only from
// its clock, so a test drives it exactly. All methods are safe for
// concurrent use.
type Limiter struct {
	cfg   Config
	clock ports.Clock

	limit atomic.Int64 // what Limit returns: min(value, ceiling)

	mu           sync.Mutex
	value        int // the AIMD state, in [Floor, ceiling]
	ceiling      int // Budget, or what a Budget grants, >= Floor
	lastRecovery time.Time
	floors       [][sizeBuckets]time.Duration // per tick and batch-size class: mean latency; 0 = no sample
	next         int
	acc          accumulator
	last         Decision
	lastAt       time.Time
	counts       map[Reason]uint64
	recent       []int // messages committed in each of the last ProbeTicks ticks, oldest first
	probe        probe
	hold         int // ticks left during which soft shrinks are held
	upWait       int // ticks left before the next upward probe
}

// probe is the measurement of a soft shrink, or of a growth under soft
// pressure (up): the limit it moved from, the mean throughput (messages
// committed per tick) before it, and the throughput since.
type probe struct {
	active, up     bool
	from           int
	before         float64
	ticks, settled int
}

// accumulator sums the samples observed since the last tick.
type accumulator struct {
	batches, transient int
	committed          int // messages of batches without a transient decision
	peakInFlight       int
	poolWait           time.Duration
	latency            [sizeBuckets]time.Duration // sums
	count              [sizeBuckets]int
}

var _ ports.ConcurrencyLimit = (*Limiter)(nil)

// NewLimiter validates cfg and returns a limiter at cfg.Initial.
func NewLimiter(cfg Config, clock ports.Clock) (*Limiter, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if clock == nil {
		return nil, fmt.Errorf("limiter %s: nil clock", cfg.Group)
	}
	l := &Limiter{
		cfg: cfg, clock: clock, value: cfg.Initial, ceiling: cfg.Budget,
		floors: make([][sizeBuckets]time.Duration, cfg.FloorWindow),
		last:   Decision{Action: ActionHold, Reason: ReasonStart, Step: StepHold, Admission: AdmissionOpen},
		counts: map[Reason]uint64{},
	}
	l.publish()
	return l, nil
}

// Group returns the consumer group's name.
func (l *Limiter) Group() string { return l.cfg.Group }

// Limit returns the current limit: within [Floor, Budget], or up to the
// ceiling a Budget granted its priority group.
func (l *Limiter) Limit() int { return int(l.limit.Load()) }

// Observe records one finished batch for the next Tick.
func (l *Limiter) Observe(s ports.BatchSample) {
	lat := s.TxLatency
	if lat <= 0 {
		lat = s.Duration
	}
	b := sizeBucket(s.Messages)
	l.mu.Lock()
	defer l.mu.Unlock()
	a := &l.acc
	a.batches++
	if s.Transient {
		a.transient++
	} else {
		a.committed += s.Messages
	}
	a.peakInFlight = max(a.peakInFlight, s.InFlight)
	a.poolWait += s.PoolWait
	if lat > 0 {
		a.latency[b] += lat
		a.count[b]++
	}
}

// sizeBucket returns the batch-size class of n messages.
func sizeBucket(n int) int {
	if n < 1 {
		n = 1
	}
	return min(bits.Len(uint(n))-1, sizeBuckets-1)
}

// Tick takes one decision: it completes s with what the samples observed
// since the last tick say (see below), applies the decision table, moves
// the limit by the decision's step and returns the decision.
//
// From the samples: Now is the clock's time; TxLatency and
// TxLatencyFloor, when s has no TxLatency, are the mean batch latency of
// the interval and the floor it is compared with (the latency of batches
// of the same sizes over the last FloorWindow ticks, so a backlog that
// fills the batches does not read as pressure); ErrorRate and PoolWait are
// at least the share of batches with a transient decision and their mean
// pool wait.
//
// The steps: grow adds GrowStep, and ramp RampStep, only when the
// interval's peak of in-flight calls reached the limit (a limit that does
// not bind is not raised); ramp first drops the limit to Floor when the
// recovery is one it has not seen (such a recovery, with its backlog,
// ramps whatever row of the table applied: the rows decide again from the
// next tick); shrink multiplies by Backoff (at least one less). The limit
// stays within [Floor, ceiling].
//
// The throughput probe (in the manner of a gradient limiter): latency,
// lock waits and pool waits are pressure only if fewer transactions
// relieve it. A shrink on one of these soft signals (ActionShrink with the
// backlog high, ActionShrinkLowLag with it low) is measured: no other soft
// shrink is taken during the ProbeTicks after it, and when the messages
// committed per tick then fall below 0.9x those of the ProbeTicks before,
// the shrink is undone (the limit goes back to at least where it was) and
// soft shrinks are held for ProbeHold ticks (reason throughput). With the
// backlog high the committed messages are what PostgreSQL gives; with it
// low they are what arrives, and a shrink that makes them fall leaves the
// consumers behind the arrivals. A PostgreSQL slowed by something
// concurrency does not cause (a CPU quota, a slow disk, a delay inside the
// transaction) thus keeps the concurrency that serves it best; one slowed
// by contention (a hot lock) commits as much with fewer transactions, so
// the shrinks stand, down to the floor. At the onset of a slowdown the
// ticks before the first shrink are the faster ones, so that shrink is
// undone and held; the ones after the hold compare like with like.
// Errors, an exhausted pool, WAL and the deadline are never held.
//
// The upward probe: with the backlog high and soft pressure, a limit at
// its floor (nothing left to shrink) or whose shrinks are held (they did
// not pay) and that binds takes one growth step (ActionProbeUp, reason
// throughput) and measures it the same way: when the messages committed
// per tick do not gain half the relative growth (from 2 to 4: 1.5x), the
// step is undone and no upward probe follows for ProbeHold ticks;
// otherwise it stays, soft shrinks are held, and the next step may
// follow. A delay that began while the limit was low is thus climbed out
// of; a hot lock keeps the floor, with one step tried every ProbeHold
// ticks.
func (l *Limiter) Tick(s Signals) Decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	s.Now = l.clock.Now()
	s = l.merge(s)
	d := l.probed(l.cfg.Policy.Decide(s))
	if d.Step != StepRamp && s.BrokerRecoveredAt.After(l.lastRecovery) && l.cfg.Policy.recoveryBacklog(s) {
		// A recovery not seen yet restarts from the floor whatever row
		// applied: a PostgreSQL already under pressure is no reason to
		// let the recovered backlog in at the current limit. The rows
		// apply again from the next tick.
		d = Decision{Action: ActionRampUp, Reason: ReasonBrokerRecovered, Pressure: d.Pressure, Step: StepRamp,
			Admission: d.Admission, SmallerBatches: d.SmallerBatches, Urgent: d.Urgent}
		l.probe = probe{}
	}
	bound := l.peakBinds()
	switch d.Step {
	case StepGrow:
		if bound {
			l.value += l.cfg.GrowStep
		}
	case StepRamp:
		if s.BrokerRecoveredAt.After(l.lastRecovery) {
			l.lastRecovery = s.BrokerRecoveredAt
			l.value = l.cfg.Floor
		} else if bound {
			l.value += l.cfg.RampStep
		}
	case StepShrink:
		if softShrink(d) && !l.probe.active && l.value > l.cfg.Floor { // at the floor there is nothing to measure
			l.probe = probe{active: true, from: l.value, before: l.recentMean()}
		}
		l.value = min(l.value-1, int(float64(l.value)*l.cfg.Backoff))
	}
	l.value = min(max(l.value, l.cfg.Floor), l.ceiling)
	l.acc = accumulator{}
	l.last, l.lastAt = d, s.Now
	l.counts[d.Reason]++
	l.publish()
	return d
}

// softShrink reports whether d is a shrink the throughput probe
// measures: one on a signal that concurrency may or may not cause
// (latency, lock waits, pool waits), with the backlog high or low.
func softShrink(d Decision) bool {
	if d.Action != ActionShrink && d.Action != ActionShrinkLowLag {
		return false
	}
	return d.Reason == ReasonLatency || d.Reason == ReasonLockWaits || d.Reason == ReasonPoolWait
}

// probed applies the throughput probe to d (see Tick) and records this
// tick's throughput; l.mu is held.
func (l *Limiter) probed(d Decision) Decision {
	committed := l.acc.committed
	l.recent = append(l.recent, committed)
	if len(l.recent) > l.cfg.ProbeTicks {
		l.recent = l.recent[1:]
	}
	soft := softShrink(d)
	if l.probe.active {
		if d.Step == StepShrink && !soft || d.Step == StepRamp {
			// A hard signal or a recovery: the measurement no longer
			// compares like with like.
			l.probe = probe{}
		} else {
			l.probe.ticks++
			l.probe.settled += committed
			if l.probe.ticks >= l.cfg.ProbeTicks {
				after := float64(l.probe.settled) / float64(l.probe.ticks)
				p := l.probe
				l.probe = probe{}
				switch {
				case p.up && l.value > p.from && after < p.before*(1+upKeep*float64(l.value-p.from)/float64(p.from)):
					// The growth did not pay: back, and no upward
					// probe for ProbeHold ticks.
					l.value, l.upWait = p.from, l.cfg.ProbeHold
					return throughputHold(d)
				case p.up:
					// It paid: shrinking would not, so soft shrinks
					// are held while the growth goes on.
					l.hold = max(l.hold, l.cfg.ProbeHold)
				case after < probeKeep*p.before:
					l.value, l.hold = max(l.value, p.from), l.cfg.ProbeHold
					return throughputHold(d)
				}
			} else if soft {
				return throughputHold(d)
			}
		}
	}
	if l.upWait > 0 {
		l.upWait--
	}
	if soft && d.Action == ActionShrink && !l.probe.active && l.upWait == 0 && (l.value <= l.cfg.Floor || l.hold > 0) &&
		l.value < l.ceiling && l.peakBinds() {
		// The upward probe: with the backlog high and a shrink that
		// cannot be taken (at the floor) or did not pay (held), try one
		// growth step and keep it only if the throughput follows.
		if l.hold > 0 {
			l.hold--
		}
		l.probe = probe{active: true, up: true, from: l.value, before: l.recentMean()}
		return Decision{Action: ActionProbeUp, Reason: ReasonThroughput, Pressure: d.Pressure, Step: StepGrow,
			Admission: d.Admission, Urgent: d.Urgent}
	}
	if l.hold > 0 {
		l.hold--
		if soft {
			return throughputHold(d)
		}
	}
	return d
}

// throughputHold is d held by a throughput probe: no step, reason
// throughput, d's pressure, admission and urgency kept.
func throughputHold(d Decision) Decision {
	return Decision{Action: ActionHold, Reason: ReasonThroughput, Pressure: d.Pressure, Step: StepHold,
		Admission: d.Admission, Urgent: d.Urgent}
}

// recentMean returns the mean messages committed per tick over the last
// ProbeTicks ticks (this one included); l.mu is held.
func (l *Limiter) recentMean() float64 {
	if len(l.recent) == 0 {
		return 0
	}
	sum := 0
	for _, n := range l.recent {
		sum += n
	}
	return float64(sum) / float64(len(l.recent))
}

// peakBinds reports whether the in-flight calls reached the limit during
// the interval.
func (l *Limiter) peakBinds() bool {
	return l.acc.peakInFlight >= int(l.limit.Load())
}

// merge completes s from the accumulated samples and records the
// interval's latencies in the floor window.
func (l *Limiter) merge(s Signals) Signals {
	a := &l.acc
	var tick [sizeBuckets]time.Duration
	for b := range sizeBuckets {
		if a.count[b] > 0 {
			tick[b] = a.latency[b] / time.Duration(a.count[b])
		}
	}
	if a.batches == 0 {
		return s
	}
	l.floors[l.next] = tick
	l.next = (l.next + 1) % len(l.floors)
	if s.TxLatency == 0 {
		var sum, floorSum time.Duration
		n := 0
		for b := range sizeBuckets {
			if a.count[b] == 0 {
				continue
			}
			sum += a.latency[b]
			floorSum += time.Duration(a.count[b]) * l.floor(b)
			n += a.count[b]
		}
		if n > 0 {
			s.TxLatency = sum / time.Duration(n)
			s.TxLatencyFloor = floorSum / time.Duration(n)
		}
	}
	s.ErrorRate = max(s.ErrorRate, float64(a.transient)/float64(a.batches))
	s.PoolWait = max(s.PoolWait, a.poolWait/time.Duration(a.batches))
	return s
}

// floor returns the lowest mean latency of batch-size class b over the
// window (the current tick included).
func (l *Limiter) floor(b int) time.Duration {
	var lo time.Duration
	for _, t := range l.floors {
		if t[b] > 0 && (lo == 0 || t[b] < lo) {
			lo = t[b]
		}
	}
	return lo
}

// setCeiling changes the highest limit (a Budget's grant), at least Floor;
// a lower ceiling lowers the limit at once, a higher one lets it grow.
func (l *Limiter) setCeiling(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ceiling = max(n, l.cfg.Floor)
	l.value = min(l.value, l.ceiling)
	l.publish()
}

// publish stores the limit Limit returns; l.mu is held.
func (l *Limiter) publish() {
	l.limit.Store(int64(min(l.value, l.ceiling)))
}

// State is a Limiter's current limit and its last decision: the values of
// the gauge consumer_concurrency_limit{group} and of the counter
// consumer_concurrency_decisions_total{group,reason}.
type State struct {
	Group string
	// Limit is what Limit returns.
	Limit int
	// Floor and Budget are the configured bounds; Ceiling is the highest
	// limit now (Budget, or what a Budget grants).
	Floor, Budget, Ceiling int
	// Last is the last decision (Reason ReasonStart before the first
	// tick) and LastAt the time of its tick.
	Last   Decision
	LastAt time.Time
	// Decisions counts the ticks by the reason of their decision.
	Decisions map[Reason]uint64
}

// State returns the limiter's state.
func (l *Limiter) State() State {
	l.mu.Lock()
	defer l.mu.Unlock()
	return State{
		Group: l.cfg.Group, Limit: l.Limit(), Floor: l.cfg.Floor, Budget: l.cfg.Budget, Ceiling: l.ceiling,
		Last: l.last, LastAt: l.lastAt, Decisions: maps.Clone(l.counts),
	}
}
