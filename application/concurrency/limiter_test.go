package concurrency_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/memory"
	"github.com/seckill-dev/seckill/application/concurrency"
	"github.com/seckill-dev/seckill/ports"
)

// newClock returns a fake clock at t0.
func newClock() *memory.Clock { return memory.NewClock(t0) }

func newLimiter(t *testing.T, cfg concurrency.Config, c *memory.Clock) *concurrency.Limiter {
	t.Helper()
	l, err := concurrency.NewLimiter(cfg, c)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// busy reports a batch of n messages with latency lat while the limit is
// fully used.
func busy(l *concurrency.Limiter, n int, lat time.Duration) {
	l.Observe(ports.BatchSample{Messages: n, Duration: lat, InFlight: l.Limit()})
}

// lagHigh is the external signal of a backlog with a healthy PostgreSQL
// (the latency comes from the samples).
func lagHigh() concurrency.Signals { return concurrency.Signals{Lag: time.Minute} }

func TestLimiterGrowsAdditivelyUpToBudget(t *testing.T) {
	c := newClock()
	l := newLimiter(t, concurrency.Config{Group: "g", Floor: 1, Budget: 9, Initial: 2}, c)
	want := []int{4, 6, 8, 9, 9}
	for i, w := range want {
		busy(l, 4, 5*time.Millisecond)
		c.Advance(time.Second)
		d := l.Tick(lagHigh())
		if d.Action != concurrency.ActionGrow || l.Limit() != w {
			t.Fatalf("tick %d: %s, limit %d; want grow to %d", i, d.Action, l.Limit(), w)
		}
	}
}

// A limit that does not bind (fewer calls in flight than allowed, or no
// batch finished) is not raised.
func TestLimiterGrowsOnlyWhenTheLimitBinds(t *testing.T) {
	c := newClock()
	l := newLimiter(t, concurrency.Config{Group: "g", Floor: 1, Budget: 10, Initial: 4}, c)
	l.Observe(ports.BatchSample{Messages: 4, Duration: time.Millisecond, InFlight: 3})
	l.Tick(lagHigh())
	l.Tick(lagHigh()) // no sample at all
	if l.Limit() != 4 {
		t.Fatalf("limit %d, want 4 (not binding)", l.Limit())
	}
}

// Multiplicative decrease on each pressure signal, never below the floor.
func TestLimiterShrinks(t *testing.T) {
	cases := []struct {
		name   string
		sample ports.BatchSample
		s      concurrency.Signals
		reason concurrency.Reason
	}{
		{"pool wait reported by the caller", ports.BatchSample{Messages: 1, Duration: time.Millisecond},
			concurrency.Signals{Lag: time.Minute, PoolWait: 50 * time.Millisecond}, concurrency.ReasonPoolWait},
		{"pool wait in the samples", ports.BatchSample{Messages: 1, Duration: time.Millisecond, PoolWait: 50 * time.Millisecond},
			lagHigh(), concurrency.ReasonPoolWait},
		{"pool exhausted", ports.BatchSample{Messages: 1, Duration: time.Millisecond},
			concurrency.Signals{Lag: time.Minute, PoolExhausted: true}, concurrency.ReasonPoolExhausted},
		{"transient decisions", ports.BatchSample{Messages: 1, Duration: time.Millisecond, Transient: true},
			lagHigh(), concurrency.ReasonErrors},
		{"lock waits", ports.BatchSample{Messages: 1, Duration: time.Millisecond},
			concurrency.Signals{Lag: time.Minute, LockWaits: 10}, concurrency.ReasonLockWaits},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newClock()
			l := newLimiter(t, concurrency.Config{Group: "g", Floor: 2, Budget: 20, Backoff: 0.5}, c)
			for _, w := range []int{10, 5, 2, 2} {
				// A soft signal's shrink is measured for ProbeTicks ticks
				// first (held, reason throughput); the throughput stays,
				// so the shrink stands and the next one follows.
				var d concurrency.Decision
				for range concurrency.DefaultProbeTicks + 1 {
					l.Observe(tc.sample)
					if d = l.Tick(tc.s); d.Step == concurrency.StepShrink {
						break
					}
					if d.Reason != concurrency.ReasonThroughput {
						t.Fatalf("%s/%s while measuring a shrink, want hold/throughput", d.Action, d.Reason)
					}
				}
				if d.Reason != tc.reason || d.Step != concurrency.StepShrink || l.Limit() != w {
					t.Fatalf("%s/%s, limit %d; want shrink by %s to %d", d.Action, d.Reason, l.Limit(), tc.reason, w)
				}
			}
		})
	}
}

// A shrink takes at least one off, even when Backoff × limit rounds to
// the limit.
func TestLimiterShrinkTakesAtLeastOne(t *testing.T) {
	l := newLimiter(t, concurrency.Config{Group: "g", Budget: 3, Backoff: 0.9}, newClock())
	l.Tick(concurrency.Signals{PoolExhausted: true})
	if l.Limit() != 2 {
		t.Fatalf("limit %d, want 2", l.Limit())
	}
}

// Latency against its recent floor, kept per batch-size class: a latency
// three times the floor of the same batch size shrinks; fuller batches
// taking longer than single messages do not.
func TestLimiterLatencyAgainstItsFloor(t *testing.T) {
	c := newClock()
	l := newLimiter(t, concurrency.Config{Group: "g", Budget: 10, Initial: 6}, c)
	for range 3 {
		busy(l, 1, 4*time.Millisecond)
		l.Tick(lagHigh())
	}
	if l.Limit() != 10 {
		t.Fatalf("limit %d after healthy ticks, want 10", l.Limit())
	}
	busy(l, 16, 30*time.Millisecond) // first full batch: its own floor
	if d := l.Tick(lagHigh()); d.Action != concurrency.ActionGrow {
		t.Fatalf("a full batch slower than a single message: %s/%s, want grow", d.Action, d.Reason)
	}
	busy(l, 1, 12*time.Millisecond)
	d := l.Tick(lagHigh())
	if d.Reason != concurrency.ReasonLatency || l.Limit() != 7 {
		t.Fatalf("latency 3x its floor: %s/%s, limit %d; want shrink by latency to 7", d.Action, d.Reason, l.Limit())
	}
	// The caller's own latency signals take precedence over the samples.
	busy(l, 1, 40*time.Millisecond)
	if d := l.Tick(concurrency.Signals{Lag: time.Minute, TxLatency: 5 * time.Millisecond, TxLatencyFloor: 4 * time.Millisecond}); d.Action != concurrency.ActionGrow {
		t.Fatalf("caller's latency at its floor: %s/%s, want grow", d.Action, d.Reason)
	}
}

// The floor is the minimum over FloorWindow ticks: an old fast interval
// leaves the window.
func TestLimiterFloorWindow(t *testing.T) {
	l := newLimiter(t, concurrency.Config{Group: "g", Budget: 10, FloorWindow: 2}, newClock())
	busy(l, 1, time.Millisecond)
	l.Tick(lagHigh())
	busy(l, 1, 3*time.Millisecond)
	if d := l.Tick(lagHigh()); d.Reason != concurrency.ReasonLatency {
		t.Fatalf("3x the floor inside the window: %s, want latency", d.Reason)
	}
	busy(l, 1, 3*time.Millisecond)
	if d := l.Tick(lagHigh()); d.Reason != concurrency.ReasonLagHigh {
		t.Fatalf("the fast tick left the window: %s, want lag_high", d.Reason)
	}
}

// After a broker recovery the limit starts again from the floor and grows
// by RampStep per tick; when the recovery window has passed it grows by
// GrowStep again. A recovery is reset to the floor only once.
func TestLimiterRampsAfterBrokerRecovery(t *testing.T) {
	c := newClock()
	l := newLimiter(t, concurrency.Config{Group: "g", Floor: 2, Budget: 20, GrowStep: 3, RampStep: 1,
		Policy: concurrency.Policy{RecoveryWindow: 10 * time.Second}}, c)
	recovered := c.Now()
	s := concurrency.Signals{Lag: time.Minute, LagTrend: 2, BrokerRecoveredAt: recovered}
	want := []int{2, 3, 4, 5, 6}
	for i, w := range want {
		busy(l, 1, time.Millisecond)
		d := l.Tick(s)
		if d.Action != concurrency.ActionRampUp || l.Limit() != w {
			t.Fatalf("ramp tick %d: %s, limit %d; want ramp to %d", i, d.Action, l.Limit(), w)
		}
		c.Advance(2 * time.Second)
	}
	// 10 s after the recovery: normal growth.
	busy(l, 1, time.Millisecond)
	if d := l.Tick(s); d.Action != concurrency.ActionGrow || l.Limit() != 9 {
		t.Fatalf("after the window: %s, limit %d; want grow to 9", d.Action, l.Limit())
	}
	// A new recovery ramps from the floor again.
	c.Advance(time.Second)
	s.BrokerRecoveredAt = c.Now()
	busy(l, 1, time.Millisecond)
	if d := l.Tick(s); d.Action != concurrency.ActionRampUp || l.Limit() != 2 {
		t.Fatalf("second recovery: %s, limit %d; want ramp from 2", d.Action, l.Limit())
	}
}

// A recovery not seen yet restarts from the floor even when PostgreSQL
// shows pressure (a row above the ramp's applies); the rows decide again
// on the next tick.
func TestLimiterRecoveryRestartsFromTheFloorUnderPressure(t *testing.T) {
	c := newClock()
	l := newLimiter(t, concurrency.Config{Group: "g", Floor: 2, Budget: 20}, c)
	s := lagHighLatency(time.Second)
	s.BrokerRecoveredAt = c.Now()
	busy(l, 20, time.Second)
	if d := l.Tick(s); d.Reason != concurrency.ReasonBrokerRecovered || d.Pressure != concurrency.ReasonLatency || l.Limit() != 2 {
		t.Fatalf("%s/%s (pressure %s), limit %d; want ramp from the floor 2 with the latency's pressure kept",
			d.Action, d.Reason, d.Pressure, l.Limit())
	}
	c.Advance(time.Second)
	busy(l, 2, time.Second)
	// At the floor under soft pressure with the limit binding, the
	// upward probe tries one step (not the ramp).
	if d := l.Tick(s); d.Action != concurrency.ActionProbeUp || l.Limit() != 4 {
		t.Fatalf("next tick: %s/%s, limit %d; want the upward probe's one step to 4", d.Action, d.Reason, l.Limit())
	}
}

// The upward probe: at the floor with the backlog high, latency pressure
// and the limit binding, one growth step is tried. When the committed
// messages follow the concurrency (a delay concurrency does not cause)
// the step stays and the next follows, up to the budget; when they do not
// (a hot lock) the step is undone and no upward probe follows for
// ProbeHold ticks.
func TestLimiterProbesUpwardFromTheFloor(t *testing.T) {
	slow := lagHighLatency(time.Second)
	run := func(t *testing.T, perSlot func(limit int) int, ticks int) (*concurrency.Limiter, []int) {
		c := newClock()
		l := newLimiter(t, concurrency.Config{Group: "g", Floor: 2, Budget: 10, Initial: 2, ProbeTicks: 2, ProbeHold: 5}, c)
		var limits []int
		for range ticks {
			l.Observe(ports.BatchSample{Messages: perSlot(l.Limit()), Duration: time.Second, InFlight: l.Limit()})
			c.Advance(time.Second)
			l.Tick(slow)
			limits = append(limits, l.Limit())
		}
		return l, limits
	}
	t.Run("throughput follows: climbs to the budget", func(t *testing.T) {
		l, limits := run(t, func(limit int) int { return 10 * limit }, 20)
		if l.Limit() != 10 {
			t.Fatalf("limits %v; want the budget 10 reached", limits)
		}
	})
	t.Run("throughput flat: back to the floor, then waits", func(t *testing.T) {
		_, limits := run(t, func(int) int { return 30 }, 12)
		// Tick 1: a step to 4; ticks 2-3 measure it; at tick 3 it is
		// undone; the next step comes ProbeHold (5) ticks later, at 8.
		want := []int{4, 4, 2, 2, 2, 2, 2, 4, 4, 2, 2, 2}
		if !slices.Equal(limits, want) {
			t.Fatalf("limits %v, want %v", limits, want)
		}
	})
}

func TestLimiterState(t *testing.T) {
	c := newClock()
	l := newLimiter(t, concurrency.Config{Group: "orders", Floor: 1, Budget: 8, Initial: 4}, c)
	if st := l.State(); st.Limit != 4 || st.Last.Reason != concurrency.ReasonStart || len(st.Decisions) != 0 {
		t.Fatalf("initial state %+v", st)
	}
	c.Advance(time.Second)
	l.Tick(concurrency.Signals{PoolExhausted: true})
	l.Tick(concurrency.Signals{PoolExhausted: true})
	l.Tick(concurrency.Signals{})
	st := l.State()
	want := map[concurrency.Reason]uint64{concurrency.ReasonPoolExhausted: 2, concurrency.ReasonLagLow: 1}
	if st.Group != "orders" || st.Limit != l.Limit() || st.Ceiling != 8 || st.Last.Reason != concurrency.ReasonLagLow ||
		!st.LastAt.Equal(c.Now()) || len(st.Decisions) != len(want) {
		t.Fatalf("state %+v", st)
	}
	for r, n := range want {
		if st.Decisions[r] != n {
			t.Errorf("decisions[%s] = %d, want %d", r, st.Decisions[r], n)
		}
	}
}

func TestLimiterConfig(t *testing.T) {
	bad := []concurrency.Config{
		{Budget: 4},
		{Group: "g", Floor: 5, Budget: 4},
		{Group: "g", Budget: 4, Initial: 5},
		{Group: "g", Budget: 4, Backoff: 1},
	}
	for _, cfg := range bad {
		if _, err := concurrency.NewLimiter(cfg, newClock()); err == nil {
			t.Errorf("NewLimiter(%+v) accepted", cfg)
		}
	}
	if _, err := concurrency.NewLimiter(concurrency.Config{Group: "g", Budget: 4}, nil); err == nil {
		t.Error("NewLimiter with a nil clock accepted")
	}
	l := newLimiter(t, concurrency.Config{Group: "g", Budget: 4}, newClock())
	if l.Limit() != 4 {
		t.Errorf("default initial limit %d, want the budget 4", l.Limit())
	}
}

// Observe and Limit from many goroutines while the caller ticks: the
// limit stays within its bounds (run with -race to check the locking).
func TestLimiterConcurrentUse(t *testing.T) {
	l := newLimiter(t, concurrency.Config{Group: "g", Floor: 2, Budget: 6}, newClock())
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 500 {
				l.Observe(ports.BatchSample{Messages: 1 + i%16, Duration: time.Millisecond, Transient: (i+g)%7 == 0, InFlight: l.Limit()})
				if n := l.Limit(); n < 2 || n > 6 {
					t.Errorf("limit %d outside [2, 6]", n)
					return
				}
			}
		})
	}
	for range 200 {
		l.Tick(lagHigh())
	}
	wg.Wait()
}

// The throughput probe: with the backlog high, a shrink on latency that
// costs throughput (the messages committed per tick fall below 0.9x those
// before it) is undone after ProbeTicks and soft shrinks are then held for
// ProbeHold ticks; one that keeps the throughput stands. Errors are never
// held; a shrink with the backlog low is measured the same way.
func TestLimiterUndoesAShrinkThatCostThroughput(t *testing.T) {
	slow := lagHighLatency(time.Second)
	tick := func(l *concurrency.Limiter, c *memory.Clock, messages int, s concurrency.Signals) concurrency.Decision {
		l.Observe(ports.BatchSample{Messages: messages, Duration: 100 * time.Millisecond, InFlight: l.Limit()})
		c.Advance(time.Second)
		return l.Tick(s)
	}
	t.Run("throughput falls: undone, then held", func(t *testing.T) {
		c := newClock()
		l := newLimiter(t, concurrency.Config{Group: "g", Floor: 2, Budget: 20, Backoff: 0.5, ProbeTicks: 2, ProbeHold: 3}, c)
		tick(l, c, 100, slow)
		if l.Limit() != 10 {
			t.Fatalf("limit %d after a latency shrink, want 10", l.Limit())
		}
		if d := tick(l, c, 50, slow); d.Reason != concurrency.ReasonThroughput || l.Limit() != 10 {
			t.Fatalf("%s/%s, limit %d while measuring; want hold/throughput at 10", d.Action, d.Reason, l.Limit())
		}
		if d := tick(l, c, 50, slow); d.Reason != concurrency.ReasonThroughput || l.Limit() != 20 {
			t.Fatalf("%s/%s, limit %d after the throughput halved; want the shrink undone to 20", d.Action, d.Reason, l.Limit())
		}
		for i := range 3 {
			if d := tick(l, c, 100, slow); d.Reason != concurrency.ReasonThroughput || l.Limit() != 20 {
				t.Fatalf("held tick %d: %s/%s, limit %d; want hold/throughput at 20", i, d.Action, d.Reason, l.Limit())
			}
		}
		if d := tick(l, c, 100, slow); d.Step != concurrency.StepShrink || l.Limit() != 10 {
			t.Fatalf("after the hold: %s/%s, limit %d; want a shrink to 10", d.Action, d.Reason, l.Limit())
		}
	})
	t.Run("throughput holds: the shrink stands", func(t *testing.T) {
		c := newClock()
		l := newLimiter(t, concurrency.Config{Group: "g", Floor: 2, Budget: 20, Backoff: 0.5, ProbeTicks: 2}, c)
		tick(l, c, 100, slow)
		if d := tick(l, c, 95, slow); d.Reason != concurrency.ReasonThroughput || l.Limit() != 10 {
			t.Fatalf("%s/%s, limit %d; want hold/throughput at 10 while measuring", d.Action, d.Reason, l.Limit())
		}
		if d := tick(l, c, 95, slow); d.Step != concurrency.StepShrink || l.Limit() != 5 {
			t.Fatalf("%s/%s, limit %d; want the shrink to stand and the next one to 5", d.Action, d.Reason, l.Limit())
		}
	})
	t.Run("errors are never held", func(t *testing.T) {
		c := newClock()
		l := newLimiter(t, concurrency.Config{Group: "g", Floor: 1, Budget: 20, Backoff: 0.5, ProbeTicks: 2}, c)
		tick(l, c, 100, slow)
		if d := tick(l, c, 10, concurrency.Signals{Lag: time.Minute, ErrorRate: 1}); d.Reason != concurrency.ReasonErrors || l.Limit() != 5 {
			t.Fatalf("%s/%s, limit %d; want a shrink on errors to 5", d.Action, d.Reason, l.Limit())
		}
	})
	t.Run("a low backlog's shrink is measured too", func(t *testing.T) {
		// With the backlog low the committed messages are what arrives: a
		// shrink after which fewer commit left the consumers behind.
		c := newClock()
		l := newLimiter(t, concurrency.Config{Group: "g", Floor: 2, Budget: 20, Backoff: 0.5, ProbeTicks: 2}, c)
		low := lagHighLatency(time.Second)
		low.Lag = 0
		if d := tick(l, c, 100, low); d.Action != concurrency.ActionShrinkLowLag || l.Limit() != 10 {
			t.Fatalf("%s/%s, limit %d; want shrink_low_lag to 10", d.Action, d.Reason, l.Limit())
		}
		if d := tick(l, c, 50, low); d.Reason != concurrency.ReasonThroughput || l.Limit() != 10 {
			t.Fatalf("%s/%s, limit %d while measuring; want hold/throughput at 10", d.Action, d.Reason, l.Limit())
		}
		if d := tick(l, c, 50, low); d.Reason != concurrency.ReasonThroughput || l.Limit() != 20 {
			t.Fatalf("%s/%s, limit %d after the throughput halved; want the shrink undone to 20", d.Action, d.Reason, l.Limit())
		}
	})
}

// lagHighLatency is a backlog high with the transaction latency at
// latency against a floor of a tenth of it.
func lagHighLatency(latency time.Duration) concurrency.Signals {
	return concurrency.Signals{Lag: time.Minute, TxLatency: latency, TxLatencyFloor: latency / 10}
}
