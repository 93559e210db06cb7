package concurrency

import "time"

// Signals is what a consumer group's controller knows at one tick: the
// broker's lag, PostgreSQL's state and the reservations' deadline. The
// caller measures the external ones (lag, pool statistics, lock waits,
// WAL); a Limiter fills the latency, error and pool-wait fields from its
// own samples when the caller left them zero (see Limiter.Tick).
type Signals struct {
	// Now is the time of the measurement (a Limiter sets it from its
	// clock).
	Now time.Time
	// Lag is the age of the group's oldest unconsumed message.
	Lag time.Duration
	// LagTrend is the lag's rate of change, in seconds of lag per second
	// (positive: the backlog grows).
	LagTrend float64
	// TxLatency is the recent transaction latency of the group's handler
	// (for example the mean over the last interval); zero when unknown.
	TxLatency time.Duration
	// TxLatencyFloor is the lowest TxLatency seen recently: the latency of
	// an unloaded PostgreSQL. Zero when unknown.
	TxLatencyFloor time.Duration
	// PoolWait is the mean time an acquire waited for a pool connection
	// over the last interval; zero when none waited or unknown.
	PoolWait time.Duration
	// PoolExhausted reports that every connection of the pool was in use
	// and acquires queued during the last interval.
	PoolExhausted bool
	// LockWaits is the number of PostgreSQL sessions waiting on a lock.
	LockWaits int
	// ErrorRate is the share, 0..1, of the group's transactions (batches)
	// that ended with a serialization failure, a timeout or another
	// transient error during the last interval.
	ErrorRate float64
	// WALSaturated reports that WAL writing or the disk is saturated
	// (WAL write/sync waits, disk utilization at its limit).
	WALSaturated bool
	// ReservationDeadline is when the oldest unresolved reservation in the
	// group's backlog reaches the point where admission closes (the
	// BacklogGate's ratio × reservation TTL after it was made); zero when
	// the group carries no reservations or none is unresolved.
	ReservationDeadline time.Time
	// BrokerRecoveredAt is when the broker last came back from an outage;
	// zero when it never went down.
	BrokerRecoveredAt time.Time
}

// Policy holds the thresholds of Decide. The zero value of a field means
// its default (DefaultPolicy).
type Policy struct {
	// LagHigh: Lag >= LagHigh is "lag high". Default 2 s.
	LagHigh time.Duration
	// LagJump: LagTrend >= LagJump is "lag jumps" (with a recent broker
	// recovery: ramp slowly). Default 0.5 s/s.
	LagJump float64
	// LatencyRatio is k: TxLatency > k × TxLatencyFloor is PostgreSQL
	// under pressure. Default 2.
	LatencyRatio float64
	// PoolWaitHigh: PoolWait >= PoolWaitHigh is pressure. Default 5 ms.
	PoolWaitHigh time.Duration
	// LockWaitsHigh: LockWaits >= LockWaitsHigh is pressure. Default 2.
	LockWaitsHigh int
	// ErrorRateHigh: ErrorRate > ErrorRateHigh is pressure. Default 0:
	// any transient error.
	ErrorRateHigh float64
	// HeadroomLow: a ReservationDeadline at most HeadroomLow after Now is
	// "reservations near their deadline". Default 10 s.
	HeadroomLow time.Duration
	// RecoveryWindow is how long after BrokerRecoveredAt a lag jump is
	// treated as the recovery's backlog. Default 30 s.
	RecoveryWindow time.Duration
}

// DefaultPolicy returns the default thresholds.
func DefaultPolicy() Policy {
	return Policy{
		LagHigh:        2 * time.Second,
		LagJump:        0.5,
		LatencyRatio:   2,
		PoolWaitHigh:   5 * time.Millisecond,
		LockWaitsHigh:  2,
		ErrorRateHigh:  0,
		HeadroomLow:    10 * time.Second,
		RecoveryWindow: 30 * time.Second,
	}
}

func (p Policy) withDefaults() Policy {
	d := DefaultPolicy()
	if p.LagHigh <= 0 {
		p.LagHigh = d.LagHigh
	}
	if p.LagJump <= 0 {
		p.LagJump = d.LagJump
	}
	if p.LatencyRatio <= 0 {
		p.LatencyRatio = d.LatencyRatio
	}
	if p.PoolWaitHigh <= 0 {
		p.PoolWaitHigh = d.PoolWaitHigh
	}
	if p.LockWaitsHigh <= 0 {
		p.LockWaitsHigh = d.LockWaitsHigh
	}
	if p.ErrorRateHigh < 0 {
		p.ErrorRateHigh = d.ErrorRateHigh
	}
	if p.HeadroomLow <= 0 {
		p.HeadroomLow = d.HeadroomLow
	}
	if p.RecoveryWindow <= 0 {
		p.RecoveryWindow = d.RecoveryWindow
	}
	return p
}

// Action names a row of the decision table (spec 22.2), or the two
// actions outside it (Shrink under pressure with lag high, Hold).
type Action string

// The actions.
const (
	// ActionGrow: lag high, PostgreSQL healthy: grow the limit (22.2 row 1).
	ActionGrow Action = "grow"
	// ActionShrinkPool: lag high, pool exhausted: do not grow, lower the
	// per-instance concurrency (row 2).
	ActionShrinkPool Action = "shrink_pool"
	// ActionLimitAdmission: lag high, WAL or disk saturated: limit the
	// entry; more consumers would only queue on WAL (row 3).
	ActionLimitAdmission Action = "limit_admission"
	// ActionShrinkLowLag: lag low, PostgreSQL under pressure: shrink and
	// take smaller batches (row 4).
	ActionShrinkLowLag Action = "shrink_low_lag"
	// ActionRampUp: lag jumps right after a broker recovery: slow start
	// from the floor, bounded growth per tick (row 5).
	ActionRampUp Action = "ramp_up"
	// ActionFailClosed: lag high, reservations near their deadline,
	// PostgreSQL without headroom: stop new reservations (row 6; the
	// BacklogGate closes PlaceOrder on the same backlog age).
	ActionFailClosed Action = "fail_closed"
	// ActionShrink: lag high and PostgreSQL under pressure other than an
	// exhausted pool or WAL (latency, lock waits, errors, pool waits):
	// shrink, as row 2 does for the pool.
	ActionShrink Action = "shrink"
	// ActionHold: lag low and PostgreSQL healthy: keep the limit.
	ActionHold Action = "hold"
	// ActionProbeUp is no row of the table: a Limiter's upward probe, one
	// growth step under soft pressure with the backlog high, kept only
	// if the throughput follows (see Limiter.Tick).
	ActionProbeUp Action = "probe_up"
)

// Reason names the signal that chose an action: the reason label of
// consumer_concurrency_decisions_total.
type Reason string

// The reasons.
const (
	ReasonLagHigh         Reason = "lag_high"
	ReasonLagLow          Reason = "lag_low"
	ReasonPoolExhausted   Reason = "pool_exhausted"
	ReasonPoolWait        Reason = "pool_wait"
	ReasonWALSaturated    Reason = "wal_saturated"
	ReasonLatency         Reason = "latency"
	ReasonLockWaits       Reason = "lock_waits"
	ReasonErrors          Reason = "errors"
	ReasonBrokerRecovered Reason = "broker_recovered"
	ReasonDeadline        Reason = "deadline"
	// ReasonThroughput: a shrink on latency, lock waits or pool waits
	// with lag high was held or undone because it did not pay (see
	// Limiter: the throughput probe).
	ReasonThroughput Reason = "throughput"
	// ReasonStart is the reason of a Limiter that has not ticked yet.
	ReasonStart Reason = "start"
)

// Step is what a decision does to a group's concurrency limit.
type Step string

// The steps.
const (
	StepGrow   Step = "grow"   // additive increase
	StepHold   Step = "hold"   // unchanged
	StepShrink Step = "shrink" // multiplicative decrease
	StepRamp   Step = "ramp"   // slow start: from the floor after a new recovery, then small steps
)

// Admission is what a decision asks of the entry (PlaceOrder).
type Admission string

// The admission answers.
const (
	AdmissionOpen     Admission = "open"     // nothing to do
	AdmissionThrottle Admission = "throttle" // limit the entry's rate
	AdmissionClosed   Admission = "closed"   // fail closed: no new reservations
)

// Decision is the controller's answer for one group at one tick.
type Decision struct {
	// Action is the row of the table that applied.
	Action Action
	// Reason is the signal that chose it.
	Reason Reason
	// Pressure is the PostgreSQL signal that showed pressure, if any
	// (for ActionFailClosed: the missing headroom); empty when healthy.
	Pressure Reason
	// Step is the change of the concurrency limit.
	Step Step
	// Admission is what the entry should do.
	Admission Admission
	// SmallerBatches asks the runner to take smaller batches.
	SmallerBatches bool
	// Urgent reports the group's reservations near their deadline: the
	// Budget gives an urgent priority group the other groups' budget.
	Urgent bool
}

// Decide applies the decision table of spec 22.2 with the default
// thresholds; see Policy.Decide.
func Decide(s Signals) Decision { return DefaultPolicy().Decide(s) }

// Decide applies the decision table of spec 22.2 to s. It is pure. The
// first matching row wins, in this order (a row protecting PostgreSQL
// before one adding load):
//
//  1. lag high, reservations near deadline, PostgreSQL under pressure:
//     fail closed (admission closed, shrink);
//  2. lag high, WAL or disk saturated: limit admission, hold;
//  3. lag high, pool exhausted: shrink;
//  4. lag high, other pressure (latency > k × floor, lock waits, errors,
//     pool waits): shrink;
//  5. lag low, any pressure: shrink, smaller batches;
//  6. broker recovered within RecoveryWindow and the lag jumps (or is
//     high): ramp up;
//  7. lag high: grow;
//  8. otherwise hold.
//
// Urgent is set whenever reservations are near their deadline, whatever
// the row.
func (p Policy) Decide(s Signals) Decision {
	p = p.withDefaults()
	lagHigh := s.Lag >= p.LagHigh
	urgent := !s.ReservationDeadline.IsZero() && s.ReservationDeadline.Sub(s.Now) <= p.HeadroomLow
	pressure := p.pressure(s)
	d := Decision{Pressure: pressure, Urgent: urgent, Admission: AdmissionOpen}
	switch {
	case lagHigh && urgent && pressure != "":
		d.Action, d.Reason, d.Step, d.Admission = ActionFailClosed, ReasonDeadline, StepShrink, AdmissionClosed
	case lagHigh && s.WALSaturated:
		d.Action, d.Reason, d.Step, d.Admission = ActionLimitAdmission, ReasonWALSaturated, StepHold, AdmissionThrottle
	case lagHigh && s.PoolExhausted:
		d.Action, d.Reason, d.Step = ActionShrinkPool, ReasonPoolExhausted, StepShrink
	case lagHigh && pressure != "":
		d.Action, d.Reason, d.Step = ActionShrink, pressure, StepShrink
	case pressure != "":
		d.Action, d.Reason, d.Step, d.SmallerBatches = ActionShrinkLowLag, pressure, StepShrink, true
	case p.recoveryBacklog(s):
		d.Action, d.Reason, d.Step = ActionRampUp, ReasonBrokerRecovered, StepRamp
	case lagHigh:
		d.Action, d.Reason, d.Step = ActionGrow, ReasonLagHigh, StepGrow
	default:
		d.Action, d.Reason, d.Step = ActionHold, ReasonLagLow, StepHold
	}
	return d
}

// pressure returns the first PostgreSQL signal showing pressure, the most
// severe first; "" when PostgreSQL is healthy.
func (p Policy) pressure(s Signals) Reason {
	switch {
	case s.PoolExhausted:
		return ReasonPoolExhausted
	case s.WALSaturated:
		return ReasonWALSaturated
	case s.ErrorRate > p.ErrorRateHigh:
		return ReasonErrors
	case s.LockWaits >= p.LockWaitsHigh:
		return ReasonLockWaits
	case s.TxLatencyFloor > 0 && float64(s.TxLatency) > p.LatencyRatio*float64(s.TxLatencyFloor):
		return ReasonLatency
	case s.PoolWait >= p.PoolWaitHigh:
		return ReasonPoolWait
	}
	return ""
}

// recoveryBacklog reports whether s shows the backlog of a broker
// recovery: the broker recovered within RecoveryWindow and the lag jumps
// or is high.
func (p Policy) recoveryBacklog(s Signals) bool {
	return p.recovering(s) && (s.Lag >= p.LagHigh || s.LagTrend >= p.LagJump)
}

// recovering reports whether the broker recovered within RecoveryWindow
// of s.Now.
func (p Policy) recovering(s Signals) bool {
	if s.BrokerRecoveredAt.IsZero() {
		return false
	}
	since := s.Now.Sub(s.BrokerRecoveredAt)
	return since >= 0 && since < p.RecoveryWindow
}
