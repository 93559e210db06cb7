package rabbitmq_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/rabbitmq"
	"github.com/seckill-dev/seckill/adapters/testkit/rabbittest"
	"github.com/seckill-dev/seckill/ports"
)

// setLimit is a test implementation of ports.ConcurrencyLimit: the limit
// is what the test sets, and the samples are counted.
type setLimit struct {
	limit             atomic.Int64
	samples, messages atomic.Int64
	bad               atomic.Int64 // samples that were not an acknowledged call with a duration
}

func (l *setLimit) Limit() int { return int(l.limit.Load()) }

func (l *setLimit) Observe(s ports.BatchSample) {
	l.samples.Add(1)
	l.messages.Add(int64(s.Messages))
	if s.Transient || s.Duration <= 0 || s.InFlight < 1 || s.InFlight > 4 {
		l.bad.Add(1)
	}
}

// TestLimitBoundsHandlerCalls: RunnerConfig.Limit bounds the concurrent
// handler calls below Concurrency: at limit 1 never more than one call at
// once, raised to 4 up to 4 at once (never more), and every call is
// reported to the limit.
func TestLimitBoundsHandlerCalls(t *testing.T) {
	t.Parallel()
	env := rabbittest.NewEnv(t, nil)
	sub := ports.Subscription{Group: "CG_LIMIT", Topic: ports.TopicOrderCreate, MaxRetries: 3}
	g := env.AddGroup(sub)
	const n, concurrency = 40, 6
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprint("evt_", i)
	}
	publishAll(t, env, g.Queues[0], ids)

	limit := &setLimit{}
	limit.limit.Store(1)
	var (
		cur, peak, calls atomic.Int32
		raised           atomic.Bool
		fourOnce         sync.Once
		four             = make(chan struct{}) // closed when 4 calls ran at once
	)
	rec := newRecorder()
	ack := rec.handler(func(ports.Delivery) ports.Decision { return ports.Acked("audited") })
	handler := handlerFunc(func(ctx context.Context, ds []ports.Delivery) []ports.Decision {
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
		return ack.HandleBatch(ctx, ds)
	})
	r, err := rabbitmq.NewRunner(env.Config, env.Topology(), rabbitmq.RunnerConfig{Group: sub.Group, Concurrency: concurrency,
		BatchSize: 1, Limit: limit}, handler, testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	startRunner(t, r)

	rec.waitFor(t, 60*time.Second, "8 messages at limit 1", func(rs []record) bool { return len(rs) >= 8 })
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
	rec.waitFor(t, 60*time.Second, "all messages", func(rs []record) bool { return len(rs) >= n })
	if p := peak.Load(); p != 4 {
		t.Fatalf("peak concurrent handler calls at limit 4 = %d, want 4 (Concurrency %d)", p, concurrency)
	}
	deadline := time.Now().Add(10 * time.Second)
	for limit.samples.Load() < int64(calls.Load()) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if s, c := limit.samples.Load(), int64(calls.Load()); s != c || limit.messages.Load() != c {
		t.Fatalf("%d samples of %d messages for %d handler calls of one message each", s, limit.messages.Load(), c)
	}
	if b := limit.bad.Load(); b > 0 {
		t.Fatalf("%d samples were not an acknowledged call with a duration and 1-4 calls in flight", b)
	}
}
