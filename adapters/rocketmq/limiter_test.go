package rocketmq_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/adapters/testkit/mqtest"
	"github.com/seckill-dev/seckill/ports"
)

// fixedLimit is a test implementation of ports.ConcurrencyLimit: the limit
// is what the test sets, and the samples are kept.
type fixedLimit struct {
	limit   atomic.Int64
	mu      sync.Mutex
	samples []ports.BatchSample
}

func (l *fixedLimit) Limit() int { return int(l.limit.Load()) }

func (l *fixedLimit) Observe(s ports.BatchSample) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.samples = append(l.samples, s)
}

func (l *fixedLimit) observed() []ports.BatchSample {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]ports.BatchSample(nil), l.samples...)
}

// RunnerConfig.Limit bounds the concurrent handler calls below
// Concurrency: at limit 1 never more than one call at once, raised to 4
// up to 4 at once (never more), and every call is reported to the limit.
func TestLimitBoundsHandlerCalls(t *testing.T) {
	t.Parallel()
	env := mqtest.NewEnv(t)
	pub := startPublisher(t, relaxed(env.Config), nil)
	topic := env.Topic(ports.TopicOrderEvent)
	const n, concurrency = 40, 6
	for i := range n {
		mustPublish(t, pub, ports.OutboundMessage{Topic: ports.TopicOrderEvent, MessageID: fmt.Sprint("evt_", i), Tag: "ORDER_CREATED", Body: []byte("{}")})
	}

	limit := &fixedLimit{}
	limit.limit.Store(1)
	var (
		cur, peak, calls atomic.Int32
		raised           atomic.Bool
		fourOnce         sync.Once
		four             = make(chan struct{}) // closed when 4 calls ran at once
	)
	rec := newRecorder()
	rc := fastRunner(env.Group(rocketmq.GroupAudit), map[string]string{topic: ""}, concurrency)
	rc.BatchSize = 1
	rc.Limit = limit
	startRunner(t, env.Config, rc, handlerFunc(func(_ context.Context, ds []ports.Delivery) []ports.Decision {
		calls.Add(1)
		now := cur.Add(1)
		defer cur.Add(-1)
		for {
			p := peak.Load()
			if now <= p || peak.CompareAndSwap(p, now) {
				break
			}
		}
		if raised.Load() {
			// Hold the calls until four run at once (bounded), so the
			// raised limit is seen in use.
			if now >= 4 {
				fourOnce.Do(func() { close(four) })
			}
			select {
			case <-four:
			case <-time.After(20 * time.Second):
			}
		} else {
			// Slow calls: without the limit, Concurrency calls would overlap.
			time.Sleep(100 * time.Millisecond)
		}
		out := make([]ports.Decision, len(ds))
		for i, d := range ds {
			rec.add(d)
			out[i] = ports.Decision{Ack: true, Outcome: "audited", TxLatency: time.Millisecond}
		}
		return out
	}), nil)

	rec.waitFor(t, 60*time.Second, "8 messages at limit 1", func(ds []ports.Delivery) bool { return len(byMessageID(ds)) >= 8 })
	if p := peak.Load(); p != 1 {
		t.Fatalf("peak concurrent handler calls at limit 1 = %d, want 1", p)
	}

	raised.Store(true)
	limit.limit.Store(4)
	select {
	case <-four:
	case <-time.After(30 * time.Second):
		t.Fatalf("4 concurrent handler calls not reached after the limit was raised to 4; peak %d", peak.Load())
	}
	rec.waitFor(t, 60*time.Second, "all messages", func(ds []ports.Delivery) bool { return len(byMessageID(ds)) == n })
	if p := peak.Load(); p != 4 {
		t.Fatalf("peak concurrent handler calls at limit 4 = %d, want 4 (Concurrency %d)", p, concurrency)
	}

	// Every finished call is reported once with its batch.
	deadline := time.Now().Add(10 * time.Second)
	for len(limit.observed()) < int(calls.Load()) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	samples := limit.observed()
	if len(samples) != int(calls.Load()) {
		t.Fatalf("%d samples for %d handler calls", len(samples), calls.Load())
	}
	msgs := 0
	for _, s := range samples {
		msgs += s.Messages
		if s.Transient || s.TxLatency != time.Millisecond || s.Duration <= 0 || s.InFlight < 1 || s.InFlight > 4 {
			t.Errorf("sample %+v: want acknowledged, TxLatency 1ms, a duration, InFlight in [1, 4]", s)
		}
	}
	if msgs != int(calls.Load()) {
		t.Errorf("samples count %d messages, want %d (one per call)", msgs, calls.Load())
	}
}
