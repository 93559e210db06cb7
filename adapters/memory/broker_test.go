package memory_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/memory"
	"github.com/seckill-dev/seckill/ports"
)

// handler records deliveries and answers with decide.
type handler struct {
	mu     sync.Mutex
	seen   []ports.Delivery
	decide func(d ports.Delivery) ports.Decision
}

func (h *handler) HandleBatch(_ context.Context, ds []ports.Delivery) []ports.Decision {
	out := make([]ports.Decision, len(ds))
	for i, d := range ds {
		out[i] = h.decide(d)
	}
	h.mu.Lock()
	h.seen = append(h.seen, ds...)
	h.mu.Unlock()
	return out
}

func (h *handler) ids() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ids []string
	for _, d := range h.seen {
		ids = append(ids, d.Properties["message_id"])
	}
	return ids
}

func newBroker(t *testing.T, cfg memory.BrokerConfig) (*memory.Broker, *memory.Clock) {
	t.Helper()
	c := memory.NewClock(start)
	cfg.Clock = c
	return memory.NewBroker(cfg), c
}

func publish(t *testing.T, b *memory.Broker, m ports.OutboundMessage) error {
	t.Helper()
	if m.Body == nil {
		m.Body = []byte("{}")
	}
	_, err := b.Publish(t.Context(), m)
	return err
}

func TestBrokerSendModes(t *testing.T) {
	b, _ := newBroker(t, memory.BrokerConfig{})
	topic := ports.TopicOrderCreate
	if err := publish(t, b, ports.OutboundMessage{Topic: topic, MessageID: "m1"}); err != nil {
		t.Fatal(err)
	}
	b.SetModeFor(topic, memory.SendUnknown, 1)
	if err := publish(t, b, ports.OutboundMessage{Topic: topic, MessageID: "m2"}); !errors.Is(err, ports.ErrSendUnknown) {
		t.Fatalf("unknown mode: %v", err)
	}
	b.SetMode(topic, memory.SendReject)
	if err := publish(t, b, ports.OutboundMessage{Topic: topic, MessageID: "m3"}); !errors.Is(err, ports.ErrSendRejected) {
		t.Fatalf("reject mode: %v", err)
	}
	b.SetMode(topic, memory.SendLost)
	if err := publish(t, b, ports.OutboundMessage{Topic: topic, MessageID: "m4"}); !errors.Is(err, ports.ErrSendUnknown) {
		t.Fatalf("lost mode: %v", err)
	}
	b.SetMode(topic, memory.SendConfirm)
	if err := publish(t, b, ports.OutboundMessage{Topic: "NOPE", MessageID: "m5"}); !errors.Is(err, ports.ErrSendRejected) {
		t.Fatalf("unknown topic: %v", err)
	}
	if err := publish(t, b, ports.OutboundMessage{Topic: topic, MessageID: "m6", MessageGroup: "g"}); !errors.Is(err, ports.ErrSendRejected) {
		t.Fatalf("message group on a NORMAL topic: %v", err)
	}
	var ids []string
	for _, m := range b.Messages(topic) {
		ids = append(ids, m.MessageID)
	}
	if !slices.Equal(ids, []string{"m1", "m2"}) || b.Sends(topic) != 4 {
		t.Fatalf("stored %v after %d sends; want [m1 m2] (unknown stores, reject and lost do not) after 4", ids, b.Sends(topic))
	}
}

func TestBrokerRedeliveryAndDeadLetter(t *testing.T) {
	b, clock := newBroker(t, memory.BrokerConfig{MaxDeliveryAttempts: 3})
	topic, group := ports.TopicOrderCreate, "CG"
	if err := publish(t, b, ports.OutboundMessage{Topic: topic, MessageID: "m1", Tag: "CREATE_ORDER"}); err != nil {
		t.Fatal(err)
	}
	h := &handler{decide: func(ports.Delivery) ports.Decision { return ports.RetryLater("transient", time.Second) }}
	for attempt := int32(1); attempt <= 3; attempt++ {
		n, err := b.Deliver(t.Context(), topic, group, h, 0)
		if err != nil || n != 1 {
			t.Fatalf("attempt %d: delivered %d, %v", attempt, n, err)
		}
		if got := h.seen[len(h.seen)-1].DeliveryAttempt; got != attempt {
			t.Fatalf("DeliveryAttempt = %d, want %d", got, attempt)
		}
		if n, _ := b.Deliver(t.Context(), topic, group, h, 0); n != 0 {
			t.Fatal("redelivered before RetryAfter passed")
		}
		clock.Advance(time.Second)
	}
	if dl := b.DeadLetters(topic, group); len(dl) != 1 || dl[0].DeliveryAttempt != 3 || b.Pending(topic, group) != 0 {
		t.Fatalf("dead letters %+v, pending %d; want one after 3 attempts, none pending", dl, b.Pending(topic, group))
	}
	// Another group gets its own copy.
	ack := &handler{decide: func(ports.Delivery) ports.Decision { return ports.Acked("created") }}
	if n, err := b.Drain(t.Context(), topic, "CG2", ack, 0); n != 1 || err != nil {
		t.Fatalf("other group drained %d, %v", n, err)
	}
}

func TestBrokerDelayAndFIFO(t *testing.T) {
	b, clock := newBroker(t, memory.BrokerConfig{TopicPrefix: "PROD_"})
	ctx := t.Context()
	if err := publish(t, b, ports.OutboundMessage{Topic: ports.TopicOrderTimeout, MessageID: "t1", DeliverAt: start.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	h := &handler{decide: func(ports.Delivery) ports.Decision { return ports.Acked("ok") }}
	if n, _ := b.Drain(ctx, ports.TopicOrderTimeout, "CG", h, 0); n != 0 {
		t.Fatal("delayed message delivered early")
	}
	clock.Advance(time.Minute)
	if n, _ := b.Drain(ctx, ports.TopicOrderTimeout, "CG", h, 0); n != 1 || h.seen[0].Topic != "PROD_ORDER_TIMEOUT" {
		t.Fatalf("delayed message: %d delivered, %+v", n, h.seen)
	}

	for _, m := range []struct{ id, group string }{{"a1", "A"}, {"a2", "A"}, {"b1", "B"}, {"a3", "A"}} {
		if err := publish(t, b, ports.OutboundMessage{Topic: ports.TopicOrderStateFIFO, MessageID: m.id, MessageGroup: m.group}); err != nil {
			t.Fatal(err)
		}
	}
	failA2 := true
	fifo := &handler{decide: func(d ports.Delivery) ports.Decision {
		if d.Properties["message_id"] == "a2" && failA2 {
			failA2 = false
			return ports.RetryLater("transient", 0)
		}
		return ports.Acked("applied")
	}}
	if n, err := b.Drain(ctx, ports.TopicOrderStateFIFO, "CG", fifo, 0); err != nil || n != 5 {
		t.Fatalf("drained %d, %v; want 5 deliveries", n, err)
	}
	if got, want := fifo.ids(), []string{"a1", "b1", "a2", "a2", "a3"}; !slices.Equal(got, want) {
		t.Fatalf("FIFO delivery order %v, want %v", got, want)
	}
}

func TestBrokerHandlerMayPublish(t *testing.T) {
	b, _ := newBroker(t, memory.BrokerConfig{})
	if err := publish(t, b, ports.OutboundMessage{Topic: ports.TopicOrderCreate, MessageID: "m1"}); err != nil {
		t.Fatal(err)
	}
	h := &handler{decide: func(d ports.Delivery) ports.Decision {
		_, err := b.Publish(context.Background(), ports.OutboundMessage{Topic: ports.TopicOrderEvent, MessageID: "e-" + d.Properties["message_id"], Body: []byte("{}")})
		if err != nil {
			return ports.RetryLater("transient", 0)
		}
		return ports.Acked("created")
	}}
	if n, err := b.Drain(t.Context(), ports.TopicOrderCreate, "CG", h, 0); n != 1 || err != nil {
		t.Fatalf("drained %d, %v", n, err)
	}
	if len(b.Messages(ports.TopicOrderEvent)) != 1 {
		t.Fatal("message published by the handler is missing")
	}
}

func TestBrokerConcurrentDeliverNoDuplicates(t *testing.T) {
	b, _ := newBroker(t, memory.BrokerConfig{})
	for i := range 50 {
		if err := publish(t, b, ports.OutboundMessage{Topic: ports.TopicOrderCreate, MessageID: string(rune('A' + i))}); err != nil {
			t.Fatal(err)
		}
	}
	h := &handler{decide: func(ports.Delivery) ports.Decision { return ports.Acked("ok") }}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { _, _ = b.Drain(t.Context(), ports.TopicOrderCreate, "CG", h, 5) })
	}
	wg.Wait()
	ids := h.ids()
	slices.Sort(ids)
	if len(ids) != 50 || len(slices.Compact(ids)) != 50 {
		t.Fatalf("%d deliveries to 4 concurrent drains, want each of the 50 messages once", len(h.ids()))
	}
}

func TestBrokerHandlerPanicLeavesMessageUnacked(t *testing.T) {
	b, _ := newBroker(t, memory.BrokerConfig{})
	if err := publish(t, b, ports.OutboundMessage{Topic: ports.TopicOrderCreate, MessageID: "m1"}); err != nil {
		t.Fatal(err)
	}
	panicky := &handler{decide: func(ports.Delivery) ports.Decision { panic("handler bug") }}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the handler's panic did not propagate")
			}
		}()
		_, _ = b.Deliver(t.Context(), ports.TopicOrderCreate, "CG", panicky, 0)
	}()
	ack := &handler{decide: func(ports.Delivery) ports.Decision { return ports.Acked("ok") }}
	if n, err := b.Drain(t.Context(), ports.TopicOrderCreate, "CG", ack, 0); n != 1 || err != nil || ack.seen[0].DeliveryAttempt != 2 {
		t.Fatalf("after a panic: drained %d, %v, %+v; want the message again as attempt 2", n, err, ack.seen)
	}
}
