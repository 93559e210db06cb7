package rabbitmq_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/rabbitmq"
	"github.com/seckill-dev/seckill/adapters/testkit/limittest"
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
	calls := limittest.NewCalls()
	rec := newRecorder()
	ack := rec.handler(func(ports.Delivery) ports.Decision { return ports.Acked("audited") })
	handler := handlerFunc(func(ctx context.Context, ds []ports.Delivery) []ports.Decision {
		calls.Run()
		return ack.HandleBatch(ctx, ds)
	})
	r, err := rabbitmq.NewRunner(env.Config, env.Topology(), rabbitmq.RunnerConfig{Group: sub.Group, Concurrency: concurrency,
		BatchSize: 1, Limit: limit}, handler, testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	startRunner(t, r)

	rec.waitFor(t, 60*time.Second, "8 messages at limit 1", func(rs []record) bool { return len(rs) >= 8 })
	if p := calls.Peak(); p != 1 {
		t.Fatalf("peak concurrent handler calls at limit 1 = %d, want 1", p)
	}
	calls.Raise(4)
	limit.limit.Store(4)
	select {
	case <-calls.Reached():
	case <-time.After(30 * time.Second):
		t.Fatalf("4 concurrent handler calls not reached after the limit was raised to 4; peak %d", calls.Peak())
	}
	rec.waitFor(t, 60*time.Second, "all messages", func(rs []record) bool { return len(rs) >= n })
	if p := calls.Peak(); p != 4 {
		t.Fatalf("peak concurrent handler calls at limit 4 = %d, want 4 (Concurrency %d)", p, concurrency)
	}
	deadline := time.Now().Add(10 * time.Second)
	for limit.samples.Load() < int64(calls.Count()) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if s, c := limit.samples.Load(), int64(calls.Count()); s != c || limit.messages.Load() != c {
		t.Fatalf("%d samples of %d messages for %d handler calls of one message each", s, limit.messages.Load(), c)
	}
	if b := limit.bad.Load(); b > 0 {
		t.Fatalf("%d samples were not an acknowledged call with a duration and 1-4 calls in flight", b)
	}
}
