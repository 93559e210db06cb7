package concurrency_test

import (
	"testing"
	"time"

	"github.com/seckill-dev/seckill/application/concurrency"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// healthy returns the signals of a healthy PostgreSQL (latency at its
// floor) with lag.
func healthy(lag time.Duration) concurrency.Signals {
	return concurrency.Signals{Now: t0, Lag: lag, TxLatency: 4 * time.Millisecond, TxLatencyFloor: 4 * time.Millisecond}
}

func with(s concurrency.Signals, f func(*concurrency.Signals)) concurrency.Signals {
	f(&s)
	return s
}

// Each row of the 22.2 table, then the rows outside it, the boundaries of
// every threshold and the precedence between rows.
func TestDecide(t *testing.T) {
	p := concurrency.DefaultPolicy()
	high, low := p.LagHigh, p.LagHigh/4
	type want struct {
		action    concurrency.Action
		reason    concurrency.Reason
		step      concurrency.Step
		admission concurrency.Admission
		smaller   bool
		urgent    bool
	}
	cases := []struct {
		name string
		s    concurrency.Signals
		want want
	}{
		// The rows of 22.2.
		{"row1 lag high, PG healthy: grow", healthy(high),
			want{concurrency.ActionGrow, concurrency.ReasonLagHigh, concurrency.StepGrow, concurrency.AdmissionOpen, false, false}},
		{"row2 lag high, pool exhausted: shrink", with(healthy(high), func(s *concurrency.Signals) { s.PoolExhausted = true }),
			want{concurrency.ActionShrinkPool, concurrency.ReasonPoolExhausted, concurrency.StepShrink, concurrency.AdmissionOpen, false, false}},
		{"row3 lag high, WAL saturated: limit admission", with(healthy(high), func(s *concurrency.Signals) { s.WALSaturated = true }),
			want{concurrency.ActionLimitAdmission, concurrency.ReasonWALSaturated, concurrency.StepHold, concurrency.AdmissionThrottle, false, false}},
		{"row4 lag low, latency high: shrink, smaller batches", with(healthy(low), func(s *concurrency.Signals) { s.TxLatency = 3 * s.TxLatencyFloor }),
			want{concurrency.ActionShrinkLowLag, concurrency.ReasonLatency, concurrency.StepShrink, concurrency.AdmissionOpen, true, false}},
		{"row5 lag jumps after broker recovery: ramp up", with(healthy(low), func(s *concurrency.Signals) {
			s.LagTrend, s.BrokerRecoveredAt = 1, t0.Add(-5*time.Second)
		}), want{concurrency.ActionRampUp, concurrency.ReasonBrokerRecovered, concurrency.StepRamp, concurrency.AdmissionOpen, false, false}},
		{"row6 lag high, deadline near, pool exhausted: fail closed", with(healthy(high), func(s *concurrency.Signals) {
			s.PoolExhausted, s.ReservationDeadline = true, t0.Add(5*time.Second)
		}), want{concurrency.ActionFailClosed, concurrency.ReasonDeadline, concurrency.StepShrink, concurrency.AdmissionClosed, false, true}},

		// Outside the table.
		{"lag low, PG healthy: hold", healthy(low),
			want{concurrency.ActionHold, concurrency.ReasonLagLow, concurrency.StepHold, concurrency.AdmissionOpen, false, false}},
		{"lag high, lock waits: shrink", with(healthy(high), func(s *concurrency.Signals) { s.LockWaits = 5 }),
			want{concurrency.ActionShrink, concurrency.ReasonLockWaits, concurrency.StepShrink, concurrency.AdmissionOpen, false, false}},
		{"lag high, transient errors: shrink", with(healthy(high), func(s *concurrency.Signals) { s.ErrorRate = 0.01 }),
			want{concurrency.ActionShrink, concurrency.ReasonErrors, concurrency.StepShrink, concurrency.AdmissionOpen, false, false}},
		{"lag high, pool waits: shrink", with(healthy(high), func(s *concurrency.Signals) { s.PoolWait = 20 * time.Millisecond }),
			want{concurrency.ActionShrink, concurrency.ReasonPoolWait, concurrency.StepShrink, concurrency.AdmissionOpen, false, false}},
		{"lag high, deadline near, PG healthy: grow, urgent", with(healthy(high), func(s *concurrency.Signals) { s.ReservationDeadline = t0.Add(time.Second) }),
			want{concurrency.ActionGrow, concurrency.ReasonLagHigh, concurrency.StepGrow, concurrency.AdmissionOpen, false, true}},
		{"lag low, pool exhausted: shrink, smaller batches", with(healthy(low), func(s *concurrency.Signals) { s.PoolExhausted = true }),
			want{concurrency.ActionShrinkLowLag, concurrency.ReasonPoolExhausted, concurrency.StepShrink, concurrency.AdmissionOpen, true, false}},
		{"lag low, WAL saturated: shrink, smaller batches", with(healthy(low), func(s *concurrency.Signals) { s.WALSaturated = true }),
			want{concurrency.ActionShrinkLowLag, concurrency.ReasonWALSaturated, concurrency.StepShrink, concurrency.AdmissionOpen, true, false}},

		// Precedence.
		{"deadline near, WAL saturated: fail closed first", with(healthy(high), func(s *concurrency.Signals) {
			s.WALSaturated, s.ReservationDeadline = true, t0
		}), want{concurrency.ActionFailClosed, concurrency.ReasonDeadline, concurrency.StepShrink, concurrency.AdmissionClosed, false, true}},
		{"deadline passed, latency high: fail closed", with(healthy(high), func(s *concurrency.Signals) {
			s.TxLatency, s.ReservationDeadline = 10*s.TxLatencyFloor, t0.Add(-time.Minute)
		}), want{concurrency.ActionFailClosed, concurrency.ReasonDeadline, concurrency.StepShrink, concurrency.AdmissionClosed, false, true}},
		{"deadline near, lag low, pressure: shrink, no fail closed", with(healthy(low), func(s *concurrency.Signals) {
			s.PoolExhausted, s.ReservationDeadline = true, t0
		}), want{concurrency.ActionShrinkLowLag, concurrency.ReasonPoolExhausted, concurrency.StepShrink, concurrency.AdmissionOpen, true, true}},
		{"WAL and pool both: limit admission", with(healthy(high), func(s *concurrency.Signals) { s.WALSaturated, s.PoolExhausted = true, true }),
			want{concurrency.ActionLimitAdmission, concurrency.ReasonWALSaturated, concurrency.StepHold, concurrency.AdmissionThrottle, false, false}},
		{"recovery with pressure: shrink, not ramp", with(healthy(high), func(s *concurrency.Signals) {
			s.ErrorRate, s.BrokerRecoveredAt = 0.5, t0.Add(-time.Second)
		}), want{concurrency.ActionShrink, concurrency.ReasonErrors, concurrency.StepShrink, concurrency.AdmissionOpen, false, false}},
		{"recovery, lag high without trend: ramp", with(healthy(high), func(s *concurrency.Signals) { s.BrokerRecoveredAt = t0 }),
			want{concurrency.ActionRampUp, concurrency.ReasonBrokerRecovered, concurrency.StepRamp, concurrency.AdmissionOpen, false, false}},

		// Boundaries.
		{"lag at LagHigh is high", healthy(p.LagHigh),
			want{concurrency.ActionGrow, concurrency.ReasonLagHigh, concurrency.StepGrow, concurrency.AdmissionOpen, false, false}},
		{"lag just below LagHigh is low", healthy(p.LagHigh - time.Nanosecond),
			want{concurrency.ActionHold, concurrency.ReasonLagLow, concurrency.StepHold, concurrency.AdmissionOpen, false, false}},
		{"latency at k x floor is healthy", with(healthy(high), func(s *concurrency.Signals) { s.TxLatency = 2 * s.TxLatencyFloor }),
			want{concurrency.ActionGrow, concurrency.ReasonLagHigh, concurrency.StepGrow, concurrency.AdmissionOpen, false, false}},
		{"latency above k x floor is pressure", with(healthy(high), func(s *concurrency.Signals) { s.TxLatency = 2*s.TxLatencyFloor + 1 }),
			want{concurrency.ActionShrink, concurrency.ReasonLatency, concurrency.StepShrink, concurrency.AdmissionOpen, false, false}},
		{"latency without floor is no signal", with(healthy(high), func(s *concurrency.Signals) { s.TxLatency, s.TxLatencyFloor = time.Second, 0 }),
			want{concurrency.ActionGrow, concurrency.ReasonLagHigh, concurrency.StepGrow, concurrency.AdmissionOpen, false, false}},
		{"pool wait at threshold is pressure", with(healthy(high), func(s *concurrency.Signals) { s.PoolWait = p.PoolWaitHigh }),
			want{concurrency.ActionShrink, concurrency.ReasonPoolWait, concurrency.StepShrink, concurrency.AdmissionOpen, false, false}},
		{"pool wait below threshold is healthy", with(healthy(high), func(s *concurrency.Signals) { s.PoolWait = p.PoolWaitHigh - 1 }),
			want{concurrency.ActionGrow, concurrency.ReasonLagHigh, concurrency.StepGrow, concurrency.AdmissionOpen, false, false}},
		{"lock waits at threshold are pressure", with(healthy(high), func(s *concurrency.Signals) { s.LockWaits = p.LockWaitsHigh }),
			want{concurrency.ActionShrink, concurrency.ReasonLockWaits, concurrency.StepShrink, concurrency.AdmissionOpen, false, false}},
		{"lock waits below threshold are healthy", with(healthy(high), func(s *concurrency.Signals) { s.LockWaits = p.LockWaitsHigh - 1 }),
			want{concurrency.ActionGrow, concurrency.ReasonLagHigh, concurrency.StepGrow, concurrency.AdmissionOpen, false, false}},
		{"deadline at HeadroomLow is near", with(healthy(high), func(s *concurrency.Signals) {
			s.PoolExhausted, s.ReservationDeadline = true, t0.Add(p.HeadroomLow)
		}), want{concurrency.ActionFailClosed, concurrency.ReasonDeadline, concurrency.StepShrink, concurrency.AdmissionClosed, false, true}},
		{"deadline beyond HeadroomLow is not near", with(healthy(high), func(s *concurrency.Signals) {
			s.PoolExhausted, s.ReservationDeadline = true, t0.Add(p.HeadroomLow+1)
		}), want{concurrency.ActionShrinkPool, concurrency.ReasonPoolExhausted, concurrency.StepShrink, concurrency.AdmissionOpen, false, false}},
		{"trend at LagJump after recovery: ramp", with(healthy(low), func(s *concurrency.Signals) {
			s.LagTrend, s.BrokerRecoveredAt = p.LagJump, t0.Add(-time.Second)
		}), want{concurrency.ActionRampUp, concurrency.ReasonBrokerRecovered, concurrency.StepRamp, concurrency.AdmissionOpen, false, false}},
		{"trend below LagJump after recovery: hold", with(healthy(low), func(s *concurrency.Signals) {
			s.LagTrend, s.BrokerRecoveredAt = p.LagJump/2, t0.Add(-time.Second)
		}), want{concurrency.ActionHold, concurrency.ReasonLagLow, concurrency.StepHold, concurrency.AdmissionOpen, false, false}},
		{"recovery just inside the window: ramp", with(healthy(high), func(s *concurrency.Signals) { s.BrokerRecoveredAt = t0.Add(-p.RecoveryWindow + 1) }),
			want{concurrency.ActionRampUp, concurrency.ReasonBrokerRecovered, concurrency.StepRamp, concurrency.AdmissionOpen, false, false}},
		{"recovery at the window's end: grow", with(healthy(high), func(s *concurrency.Signals) { s.BrokerRecoveredAt = t0.Add(-p.RecoveryWindow) }),
			want{concurrency.ActionGrow, concurrency.ReasonLagHigh, concurrency.StepGrow, concurrency.AdmissionOpen, false, false}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := p.Decide(c.s)
			got := want{d.Action, d.Reason, d.Step, d.Admission, d.SmallerBatches, d.Urgent}
			if got != c.want {
				t.Errorf("Decide = %+v, want %+v", got, c.want)
			}
			if d != concurrency.Decide(c.s) {
				t.Errorf("Policy.Decide of the default policy and Decide differ")
			}
		})
	}
}

// Pressure names the PostgreSQL signal behind a shrink and the missing
// headroom behind a fail-closed decision.
func TestDecidePressure(t *testing.T) {
	d := concurrency.Decide(with(healthy(time.Minute), func(s *concurrency.Signals) {
		s.LockWaits, s.ReservationDeadline = 9, t0
	}))
	if d.Action != concurrency.ActionFailClosed || d.Pressure != concurrency.ReasonLockWaits {
		t.Errorf("Decide = %+v, want fail closed with pressure lock_waits", d)
	}
	if d := concurrency.Decide(healthy(time.Minute)); d.Pressure != "" {
		t.Errorf("healthy: Pressure = %q, want none", d.Pressure)
	}
}
