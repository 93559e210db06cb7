package rocketmq_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/rocketmq"
	"github.com/seckill-dev/seckill/adapters/testkit/limittest"
	"github.com/seckill-dev/seckill/adapters/testkit/mqtest"
	"github.com/seckill-dev/seckill/ports"
)

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

	limit := limittest.NewLimit(1)
	calls := limittest.NewCalls()
	rec := newRecorder()
	rc := fastRunner(env.Group(rocketmq.GroupAudit), map[string]string{topic: ""}, concurrency)
	rc.BatchSize = 1
	rc.Limit = limit
	startRunner(t, env.Config, rc, handlerFunc(func(_ context.Context, ds []ports.Delivery) []ports.Decision {
		calls.Run()
		out := make([]ports.Decision, len(ds))
		for i, d := range ds {
			rec.add(d)
			out[i] = ports.Decision{Ack: true, Outcome: "audited", TxLatency: time.Millisecond}
		}
		return out
	}), nil)

	rec.waitFor(t, 60*time.Second, "8 messages at limit 1", func(ds []ports.Delivery) bool { return len(byMessageID(ds)) >= 8 })
	if p := calls.Peak(); p != 1 {
		t.Fatalf("peak concurrent handler calls at limit 1 = %d, want 1", p)
	}

	calls.Raise(4)
	limit.Set(4)
	select {
	case <-calls.Reached():
	case <-time.After(30 * time.Second):
		t.Fatalf("4 concurrent handler calls not reached after the limit was raised to 4; peak %d", calls.Peak())
	}
	rec.waitFor(t, 60*time.Second, "all messages", func(ds []ports.Delivery) bool { return len(byMessageID(ds)) == n })
	if p := calls.Peak(); p != 4 {
		t.Fatalf("peak concurrent handler calls at limit 4 = %d, want 4 (Concurrency %d)", p, concurrency)
	}

	// Every finished call is reported once with its batch.
	deadline := time.Now().Add(10 * time.Second)
	for len(limit.Samples()) < int(calls.Count()) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	samples := limit.Samples()
	if len(samples) != int(calls.Count()) {
		t.Fatalf("%d samples for %d handler calls", len(samples), calls.Count())
	}
	msgs := 0
	for _, s := range samples {
		msgs += s.Messages
		if s.Transient || s.TxLatency != time.Millisecond || s.Duration <= 0 || s.InFlight < 1 || s.InFlight > 4 {
			t.Errorf("sample %+v: want acknowledged, TxLatency 1ms, a duration, InFlight in [1, 4]", s)
		}
	}
	if msgs != int(calls.Count()) {
		t.Errorf("samples count %d messages, want %d (one per call)", msgs, calls.Count())
	}
}
