package rocketmq

import (
	"math/rand/v2"
	"sync"
	"time"
)

// Breaker states, also the values of the mq_breaker_state gauge.
const (
	BreakerClosed   = 0 // sends go through
	BreakerHalfOpen = 1 // one probe send is in flight; the others are skipped
	BreakerOpen     = 2 // sends are skipped until the next probe time
)

// BreakerConfig tunes the publisher's view of the broker's health.
type BreakerConfig struct {
	// Failures is how many consecutive transport failures (timeouts,
	// connection errors, server errors) open the breaker, provided that
	// no send succeeded for MinOutage either.
	Failures  int
	MinOutage time.Duration
	// OpenMin and OpenMax bound how long the breaker stays open before
	// the next probe: OpenMin after the first opening, doubling (with
	// jitter) while probes fail.
	OpenMin, OpenMax time.Duration
	// TimeoutMax caps the adaptive send timeout; the floor is the
	// configured send timeout. A probe gets TimeoutMax.
	TimeoutMax time.Duration
}

// withDefaults fills the zero fields of c for a base send timeout.
func (c BreakerConfig) withDefaults(base time.Duration) BreakerConfig {
	if c.Failures <= 0 {
		c.Failures = 5
	}
	if c.MinOutage <= 0 {
		c.MinOutage = time.Second
	}
	if c.OpenMin <= 0 {
		c.OpenMin = 500 * time.Millisecond
	}
	if c.OpenMax <= 0 {
		c.OpenMax = 2 * time.Second
	}
	if c.TimeoutMax <= 0 {
		c.TimeoutMax = max(10*base, time.Second)
	}
	return c
}

// breaker is the publisher's circuit breaker for its one endpoint (the
// proxy) and the adaptive send timeout. It is shared by every caller of
// the publisher (PlaceOrder, the resend scanner, the outbox relay), so
// they hold one view of the broker: while it is open no send is attempted
// just to time out, and one probe at a time finds out when the broker is
// back. Safe for concurrent use.
type breaker struct {
	cfg  BreakerConfig
	base time.Duration
	now  func() time.Time

	mu          sync.Mutex
	state       int
	failures    int
	lastSuccess time.Time
	retryAt     time.Time
	openFor     time.Duration
	latency     time.Duration // smoothed latency of successful sends
}

func newBreaker(cfg BreakerConfig, base time.Duration, now func() time.Time) *breaker {
	return &breaker{cfg: cfg.withDefaults(base), base: base, now: now, lastSuccess: now()}
}

// admit decides whether a send may go out now. It returns the send's
// timeout and whether it is the half-open probe; ok false means skip the
// send (the broker is believed down until retryAt).
func (b *breaker) admit() (timeout time.Duration, probe, ok bool, retryAt time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case BreakerOpen:
		if b.now().Before(b.retryAt) {
			return 0, false, false, b.retryAt
		}
		b.state = BreakerHalfOpen
		return b.cfg.TimeoutMax, true, true, time.Time{}
	case BreakerHalfOpen:
		return 0, false, false, b.retryAt
	}
	return b.timeoutLocked(), false, true, time.Time{}
}

// timeoutLocked is the adaptive timeout: four times the smoothed latency
// of successful sends, within [base, TimeoutMax].
func (b *breaker) timeoutLocked() time.Duration {
	return min(max(4*b.latency, b.base), b.cfg.TimeoutMax)
}

// record reports a send's result: ok (the broker answered, whether it
// stored the message or refused it definitely), a transport failure, or
// neither (the caller canceled).
func (b *breaker) record(probe bool, result sendResult, elapsed, timeout time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	switch result {
	case resultAnswered:
		b.failures = 0
		b.lastSuccess = now
		b.state = BreakerClosed
		b.openFor = 0
		if probe {
			// A broker back from an outage is warming up (a restarted
			// proxy answers in hundreds of milliseconds for a while):
			// start from the longest timeout and let the answers bring
			// it down, rather than time out sends it would have stored.
			b.latency = max(b.latency, b.cfg.TimeoutMax/4)
		}
		if b.latency == 0 {
			b.latency = elapsed
		} else {
			b.latency = (7*b.latency + elapsed) / 8
		}
	case resultTransportFailure:
		b.failures++
		// A timeout says the latency is at least the timeout: the next
		// sends get more time (within TimeoutMax) while the broker is slow.
		b.latency = max(b.latency, timeout/2)
		switch {
		case probe:
			b.open(now)
		case b.state == BreakerClosed && b.failures >= b.cfg.Failures && now.Sub(b.lastSuccess) >= b.cfg.MinOutage:
			b.open(now)
		}
	default:
		if probe {
			b.state = BreakerOpen // let the next caller probe at once
			b.retryAt = now
		}
	}
}

// open opens the breaker until the next probe, doubling the wait while
// probes keep failing, with jitter so that instances do not probe in step.
func (b *breaker) open(now time.Time) {
	if b.openFor == 0 {
		b.openFor = b.cfg.OpenMin
	} else {
		b.openFor = min(2*b.openFor, b.cfg.OpenMax)
	}
	jitter := time.Duration(rand.Int64N(int64(b.openFor/4) + 1))
	b.state = BreakerOpen
	b.retryAt = now.Add(b.openFor - b.openFor/8 + jitter)
}

// available reports whether admit would let a send through now, without
// taking the probe; when not, the time of the next probe.
func (b *breaker) available() (bool, time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.state == BreakerHalfOpen, b.state == BreakerOpen && b.now().Before(b.retryAt):
		return false, b.retryAt
	}
	return true, time.Time{}
}

// snapshot returns the state and the current adaptive timeout.
func (b *breaker) snapshot() (state int, timeout time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state, b.timeoutLocked()
}

// sendResult is what a send tells about the broker's health.
type sendResult int

const (
	resultNeutral          sendResult = iota // canceled by the caller: says nothing
	resultAnswered                           // the broker answered (confirmed or definite failure)
	resultTransportFailure                   // timeout, connection error, server error
)
