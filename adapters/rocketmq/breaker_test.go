package rocketmq

import (
	"testing"
	"time"
)

type fakeNow struct{ t time.Time }

func (f *fakeNow) now() time.Time          { return f.t }
func (f *fakeNow) advance(d time.Duration) { f.t = f.t.Add(d) }

// TestBreakerOpensProbesAndCloses walks the breaker through an outage:
// failures alone do not open it until the outage lasted MinOutage; open,
// it skips sends until the probe time; one probe at a time goes out with
// the longest timeout; a failed probe opens it for longer; a successful
// probe closes it.
func TestBreakerOpensProbesAndCloses(t *testing.T) {
	clk := &fakeNow{t: time.Unix(1_000_000, 0)}
	b := newBreaker(BreakerConfig{Failures: 3, MinOutage: time.Second, OpenMin: 400 * time.Millisecond,
		OpenMax: 2 * time.Second, TimeoutMax: time.Second}, 50*time.Millisecond, clk.now)
	fail := func(probe bool) { b.record(probe, resultTransportFailure, 50*time.Millisecond, 50*time.Millisecond) }

	for range 5 {
		if _, _, ok, _ := b.admit(); !ok {
			t.Fatal("closed breaker skipped a send")
		}
		fail(false)
	}
	if ok, _ := b.available(); !ok {
		t.Fatal("a burst of failures within MinOutage of the last success opened the breaker")
	}
	clk.advance(1100 * time.Millisecond)
	fail(false)
	ok, retryAt := b.available()
	if ok {
		t.Fatal("failures over more than MinOutage did not open the breaker")
	}
	if d := retryAt.Sub(clk.t); d < 300*time.Millisecond || d > 500*time.Millisecond {
		t.Fatalf("first open for %s, want about OpenMin", d)
	}
	if _, _, ok, _ := b.admit(); ok {
		t.Fatal("open breaker let a send through before the probe time")
	}

	clk.advance(time.Second)
	timeout, probe, ok, _ := b.admit()
	if !ok || !probe || timeout != time.Second {
		t.Fatalf("at the probe time: ok %v probe %v timeout %s, want the probe with TimeoutMax", ok, probe, timeout)
	}
	if _, _, ok, _ := b.admit(); ok {
		t.Fatal("a second send went out while the probe was in flight")
	}
	fail(true)
	_, retryAt = b.available()
	if d := retryAt.Sub(clk.t); d < 700*time.Millisecond || d > time.Second {
		t.Fatalf("after a failed probe open for %s, want about twice OpenMin", d)
	}

	clk.advance(2 * time.Second)
	_, probe, ok, _ = b.admit()
	if !ok || !probe {
		t.Fatal("no probe after the second wait")
	}
	b.record(true, resultAnswered, 20*time.Millisecond, time.Second)
	if ok, _ := b.available(); !ok {
		t.Fatal("a successful probe did not close the breaker")
	}
	state, timeout := b.snapshot()
	if state != BreakerClosed {
		t.Fatalf("state %d after a successful probe", state)
	}
	// Back from an outage the broker warms up: the first sends after the
	// probe get (nearly) the longest timeout, then answers bring it down.
	if timeout < 800*time.Millisecond {
		t.Fatalf("timeout right after the probe closed the breaker = %s, want near TimeoutMax (1s)", timeout)
	}
	for range 60 {
		b.record(false, resultAnswered, 5*time.Millisecond, timeout)
	}
	if _, to := b.snapshot(); to != 50*time.Millisecond {
		t.Fatalf("timeout after the broker warmed up = %s, want back at the floor 50ms", to)
	}
}

// TestBreakerTimeoutFollowsLatency: the send timeout is four times the
// smoothed latency of successful sends, never below the configured one and
// never above TimeoutMax; a timeout raises it.
func TestBreakerTimeoutFollowsLatency(t *testing.T) {
	clk := &fakeNow{t: time.Unix(1_000_000, 0)}
	b := newBreaker(BreakerConfig{TimeoutMax: 400 * time.Millisecond}, 50*time.Millisecond, clk.now)
	if _, to := b.snapshot(); to != 50*time.Millisecond {
		t.Fatalf("initial timeout %s, want the configured 50ms", to)
	}
	for range 50 {
		b.record(false, resultAnswered, 2*time.Millisecond, 50*time.Millisecond)
	}
	if _, to := b.snapshot(); to != 50*time.Millisecond {
		t.Fatalf("fast broker: timeout %s, want the floor 50ms", to)
	}
	b.record(false, resultTransportFailure, 50*time.Millisecond, 50*time.Millisecond)
	if _, to := b.snapshot(); to != 100*time.Millisecond {
		t.Fatalf("after a timeout: %s, want 100ms", to)
	}
	for range 5 {
		_, to := b.snapshot()
		b.record(false, resultTransportFailure, to, to)
	}
	if _, to := b.snapshot(); to != 400*time.Millisecond {
		t.Fatalf("slow broker: timeout %s, want the cap 400ms", to)
	}
	for range 60 {
		b.record(false, resultAnswered, 3*time.Millisecond, 400*time.Millisecond)
	}
	if _, to := b.snapshot(); to != 50*time.Millisecond {
		t.Fatalf("recovered broker: timeout %s, want back at 50ms", to)
	}
}

// TestBreakerIgnoresCallerCancellation: a send the caller gave up on says
// nothing about the broker.
func TestBreakerIgnoresCallerCancellation(t *testing.T) {
	clk := &fakeNow{t: time.Unix(1_000_000, 0)}
	b := newBreaker(BreakerConfig{Failures: 1, MinOutage: time.Nanosecond}, 50*time.Millisecond, clk.now)
	clk.advance(time.Second)
	for range 10 {
		b.record(false, resultNeutral, time.Millisecond, 50*time.Millisecond)
	}
	if ok, _ := b.available(); !ok {
		t.Fatal("canceled sends opened the breaker")
	}
}
