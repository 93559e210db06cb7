package brokerkit

import (
	"context"
	"sync"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

// limitPoll is how often a receive held by a LimitGate reads the limit
// again when no handler call ends.
const limitPoll = 50 * time.Millisecond

// LimitGate holds the receives and handler calls of one consumer runner
// to a ports.ConcurrencyLimit: one enters (after taking the runner's own
// slot, whose count is the hard cap) only while fewer than min(Limit(),
// hard cap) are in, and a raised limit is seen when one leaves or within
// 50 ms. A nil *LimitGate lets everything in and observes nothing, so a
// runner without a limit calls it unconditionally. Safe for concurrent
// use.
type LimitGate struct {
	limit ports.ConcurrencyLimit
	max   int

	mu       sync.Mutex
	inflight int
	freed    chan struct{} // closed (and replaced) when one leaves
}

// NewLimitGate returns the gate of limit under the hard cap max (the
// runner's Concurrency).
func NewLimitGate(limit ports.ConcurrencyLimit, max int) *LimitGate {
	return &LimitGate{limit: limit, max: max, freed: make(chan struct{})}
}

// Enter waits until the limit lets one more in (true), or ctx ends
// (false). Every true is paired with one Leave.
func (g *LimitGate) Enter(ctx context.Context) bool {
	if g == nil {
		return true
	}
	for {
		g.mu.Lock()
		if g.inflight < min(max(g.limit.Limit(), 1), g.max) {
			g.inflight++
			g.mu.Unlock()
			return true
		}
		freed := g.freed
		g.mu.Unlock()
		t := time.NewTimer(limitPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-freed:
		case <-t.C:
		}
		t.Stop()
	}
}

// Leave lets the next one in.
func (g *LimitGate) Leave() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inflight--
	close(g.freed)
	g.freed = make(chan struct{})
}

// inFlight returns the number of receives and handler calls in.
func (g *LimitGate) inFlight() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inflight
}

// Observe returns h reporting every call to the gate's limit
// (ports.ConcurrencyLimit.Observe); on a nil gate it returns h.
func (g *LimitGate) Observe(h ports.BatchHandler) ports.BatchHandler {
	if g == nil {
		return h
	}
	return observed{BatchHandler: h, gate: g}
}

// observed reports every call of its handler to the gate's limit.
type observed struct {
	ports.BatchHandler
	gate *LimitGate
}

// HandleBatch calls the handler and reports the batch: a panicking handler
// is reported as transient (the panic goes on to the runner).
func (o observed) HandleBatch(ctx context.Context, ds []ports.Delivery) (decisions []ports.Decision) {
	s := ports.BatchSample{Messages: len(ds), InFlight: o.gate.inFlight()}
	start := time.Now()
	returned := false
	defer func() {
		s.Duration = time.Since(start)
		s.Transient = !returned
		for _, d := range decisions {
			s.Transient = s.Transient || !d.Ack
			s.TxLatency = max(s.TxLatency, d.TxLatency)
		}
		o.gate.limit.Observe(s)
	}()
	decisions = o.BatchHandler.HandleBatch(ctx, ds)
	returned = true
	return decisions
}
