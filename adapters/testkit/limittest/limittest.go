// Package limittest holds what the broker adapters' tests of
// RunnerConfig.Limit share: a limit the test sets and a tracker of the
// handler calls that run at once. For tests only.
package limittest

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

// Limit is a test implementation of ports.ConcurrencyLimit: the limit is
// what the test sets, and the samples are kept. Safe for concurrent use.
type Limit struct {
	limit   atomic.Int64
	mu      sync.Mutex
	samples []ports.BatchSample
}

// NewLimit returns a limit of n.
func NewLimit(n int) *Limit {
	l := &Limit{}
	l.Set(n)
	return l
}

// Set changes the limit.
func (l *Limit) Set(n int) { l.limit.Store(int64(n)) }

// Limit implements ports.ConcurrencyLimit.
func (l *Limit) Limit() int { return int(l.limit.Load()) }

// Observe implements ports.ConcurrencyLimit.
func (l *Limit) Observe(s ports.BatchSample) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.samples = append(l.samples, s)
}

// Samples returns the samples observed so far.
func (l *Limit) Samples() []ports.BatchSample {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]ports.BatchSample(nil), l.samples...)
}

// Calls tracks the handler calls of a runner under a Limit: how many ran,
// and the most that ran at once. Before Raise every call takes 100 ms (so
// that, without the limit, the runner's Concurrency calls would overlap);
// after Raise(n) the calls are held until n run at once (at most 20 s
// each), so the raised limit is seen in use.
type Calls struct {
	cur, peak, calls atomic.Int32
	target           atomic.Int32 // 0 until Raise
	once             sync.Once
	reached          chan struct{}
}

// NewCalls returns a tracker with no call yet.
func NewCalls() *Calls { return &Calls{reached: make(chan struct{})} }

// Run is what a handler call does before deciding: it counts the call,
// records the peak and waits as described on Calls.
func (c *Calls) Run() {
	c.calls.Add(1)
	now := c.cur.Add(1)
	defer c.cur.Add(-1)
	for {
		p := c.peak.Load()
		if now <= p || c.peak.CompareAndSwap(p, now) {
			break
		}
	}
	target := c.target.Load()
	if target == 0 {
		time.Sleep(100 * time.Millisecond)
		return
	}
	if now >= target {
		c.once.Do(func() { close(c.reached) })
	}
	select {
	case <-c.reached:
	case <-time.After(20 * time.Second):
	}
}

// Raise makes the next calls wait until n run at once.
func (c *Calls) Raise(n int) { c.target.Store(int32(n)) }

// Reached is closed once the raised number of calls ran at once.
func (c *Calls) Reached() <-chan struct{} { return c.reached }

// Peak returns the most calls that ran at once.
func (c *Calls) Peak() int32 { return c.peak.Load() }

// Count returns how many calls ran.
func (c *Calls) Count() int32 { return c.calls.Load() }
