package scenarios_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/memory"
	"github.com/seckill-dev/seckill/application"
	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

// coalescingRelay makes h's relay merge the payment-timeout rows of one
// activity and due second (RelayConfig.CoalesceTimeouts).
func (h *harness) coalescingRelay() {
	h.relay = application.NewRelayOutbox(h.store, h.broker, h.clock, h.fp, slog.New(slog.NewTextHandler(io.Discard, nil)),
		application.RelayConfig{Interval: time.Second, Batch: 500, Workers: 4, Retention: time.Hour,
			BackoffBase: 100 * time.Millisecond, BackoffMax: time.Second, CoalesceTimeouts: true})
}

// timeoutChecks decodes every relayed payment-timeout message: the
// checks by order id, and how many messages were triggers.
func (h *harness) timeoutChecks() (map[string]message.CancelOrderIfUnpaid, []message.CancelOrdersIfUnpaid) {
	h.t.Helper()
	checks := map[string]message.CancelOrderIfUnpaid{}
	var triggers []message.CancelOrdersIfUnpaid
	for _, m := range h.broker.Messages(ports.TopicOrderTimeout) {
		env, cs, err := message.DecodePaymentTimeout(m.Body)
		if err != nil {
			h.t.Fatalf("relayed timeout message %s: %v", m.MessageID, err)
		}
		if env.EventType == message.TypeCancelOrdersIfUnpaid {
			var trig message.CancelOrdersIfUnpaid
			if err := json.Unmarshal(m.Body, &trig); err != nil {
				h.t.Fatal(err)
			}
			if !trig.DeliverAt.Equal(m.DeliverAt) {
				h.t.Fatalf("trigger %s: body due %v, sent due %v", m.MessageID, trig.DeliverAt, m.DeliverAt)
			}
			triggers = append(triggers, trig)
		}
		for _, c := range cs {
			if _, dup := checks[c.OrderID]; dup {
				h.t.Fatalf("order %s is checked by two relayed messages", c.OrderID)
			}
			checks[c.OrderID] = c
		}
	}
	return checks, triggers
}

// TestTimeoutTriggerStandsForItsOrders: with coalescing on, the relay
// sends the payment-timeout checks of 30 orders of one activity due in the
// same second as one CANCEL_ORDERS_IF_UNPAID trigger, due in that second,
// and a second activity's orders as a trigger of their own. Delivered
// before the deadline, the trigger changes nothing and comes back; after
// it, every unpaid order is canceled once, the one paid at the last moment
// is left alone, and the same checks sent again as single messages or as
// the trigger are duplicates. I1-I6 hold at rest.
func TestTimeoutTriggerStandsForItsOrders(t *testing.T) {
	h := newHarness(t)
	h.coalescingRelay()
	const n = 30
	h.activity(1, n, time.Minute, time.Minute)
	h.activity(2, 5, time.Minute, time.Minute)
	ids := h.buyAll(1, users(1, n))
	other := h.buyAll(2, users(100, 5))

	checks, triggers := h.timeoutChecks()
	if len(checks) != n+5 {
		t.Fatalf("%d orders have a relayed timeout check, want %d", len(checks), n+5)
	}
	for _, id := range append(slices.Collect(maps.Values(ids)), slices.Collect(maps.Values(other))...) {
		if _, ok := checks[id]; !ok {
			t.Fatalf("order %s has no relayed timeout check", id)
		}
	}
	if got := len(h.broker.Messages(ports.TopicOrderTimeout)); got != 2 || len(triggers) != 2 {
		t.Fatalf("%d timeout messages (%d triggers) for two activities' orders due in one second each, want 2 triggers", got, len(triggers))
	}
	for _, trig := range triggers {
		for _, c := range trig.Checks {
			if c.ActivityID != trig.ActivityID || trig.DeliverAt.Before(c.DeliverAt) || trig.DeliverAt.Sub(c.DeliverAt) >= time.Second {
				t.Fatalf("trigger of activity %d due %v holds a check of activity %d due %v", trig.ActivityID, trig.DeliverAt, c.ActivityID, c.DeliverAt)
			}
		}
	}
	var trigger ports.Delivery
	for _, m := range h.broker.Messages(ports.TopicOrderTimeout) {
		if slices.Contains(m.Keys, "1") {
			trigger = ports.Delivery{Topic: "ORDER_TIMEOUT", Body: m.Body, DeliveryAttempt: 1}
		}
	}

	// Early: nothing changes and the trigger asks to come back.
	d := h.timeouts.HandleBatch(context.Background(), []ports.Delivery{trigger})
	if d[0].Ack || d[0].RetryAfter <= 0 {
		t.Fatalf("a trigger before its orders' deadline: %+v, want a later retry", d[0])
	}
	for _, id := range ids {
		if s := h.orderOf(id).Status; s != order.StatusCreated {
			t.Fatalf("order %s is %s after an early trigger", id, s)
		}
	}

	// The last moment: one order is paid; then every deadline passes.
	h.clock.Advance(time.Minute - time.Millisecond)
	paid := ids[1]
	if _, err := h.orders.PayOrder(context.Background(), paid, "pay-last-moment"); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(time.Second + time.Millisecond)
	h.settle()
	h.timedOutBut(ids, paid)
	for _, id := range other {
		if s := h.orderOf(id).Status; s != order.StatusCanceled {
			t.Fatalf("order %s of the second activity is %s, want CANCELED", id, s)
		}
	}

	// The same checks again, as single messages and as the trigger: each
	// is a duplicate of the check that decided it.
	var again []ports.Delivery
	for _, id := range []string{ids[2], ids[3], paid} {
		body, err := checks[id].Encode()
		if err != nil {
			t.Fatal(err)
		}
		again = append(again, ports.Delivery{Topic: "ORDER_TIMEOUT", Body: body, DeliveryAttempt: 1})
	}
	again = append(again, trigger)
	before := h.eventTypes()
	for i, dec := range h.timeouts.HandleBatch(context.Background(), again) {
		if !dec.Ack || dec.Outcome != "duplicate" {
			t.Fatalf("redelivery %d: %+v, want an acknowledged duplicate", i, dec)
		}
	}
	h.settle()
	if after := h.eventTypes(); len(after) != len(before) || !sameEvents(before, after) {
		t.Fatal("redelivered checks changed an order's stream")
	}
	h.invariants(1)
	h.invariants(2)
}

// TestTimeoutTriggerFailsAsOne: when the trigger's send fails, none of
// the rows it stands for is marked published; the next pass sends them
// again and every order is checked.
func TestTimeoutTriggerFailsAsOne(t *testing.T) {
	h := newHarness(t)
	h.coalescingRelay()
	h.activity(1, 4, time.Minute, time.Minute)
	h.broker.SetMode(ports.TopicOrderTimeout, memory.SendReject)
	for u := int64(1); u <= 4; u++ {
		if _, err := h.placeOrder(u, 1, req(int(u))); err != nil {
			t.Fatal(err)
		}
	}
	h.drain(ports.TopicOrderCreate, groupCreate, h.create, 32)
	if _, err := h.relayOnce(); err != nil {
		t.Fatal(err)
	}
	if got := h.count(`SELECT count(*) FROM event_outbox WHERE published_at IS NULL AND topic = $1`, string(ports.TopicOrderTimeout)); got != 4 {
		t.Fatalf("%d timeout rows unpublished after the trigger's send failed, want all 4", got)
	}
	h.broker.SetMode(ports.TopicOrderTimeout, memory.SendConfirm)
	h.clock.Advance(time.Minute + time.Second)
	h.settle()
	if got := h.count(`SELECT count(*) FROM event_outbox WHERE published_at IS NULL`); got != 0 {
		t.Fatalf("%d outbox rows left after the retry", got)
	}
	checks, _ := h.timeoutChecks()
	if len(checks) != 4 {
		t.Fatalf("%d orders checked, want 4", len(checks))
	}
	for id := range checks {
		if s := h.orderOf(id).Status; s != order.StatusCanceled {
			t.Fatalf("order %s is %s, want CANCELED", id, s)
		}
	}
	h.invariants(1)
}

func sameEvents(a, b map[string][]order.EventType) bool {
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// TestTimeoutsWaitInPostgresWhenTheBrokerCannotDelay: on a broker without
// delayed delivery (it refuses a message with DeliverAt) the relay holds
// each payment-timeout row in the outbox until it is due, counting no
// attempt, and then publishes it without DeliverAt; with coalescing on
// too, the orders still unpaid at the deadline are canceled once and the
// one paid before it is left alone. I1-I6 hold at rest.
func TestTimeoutsWaitInPostgresWhenTheBrokerCannotDelay(t *testing.T) {
	h := newHarness(t)
	h.broker = memory.NewBroker(memory.BrokerConfig{Clock: h.clock, NoDelay: true})
	h.place = application.NewPlaceOrder(h.redis, h.redis, h.broker, h.activities, h.gate, h.queries,
		application.NewSentMarker(h.redis, slog.New(slog.DiscardHandler), 0), memory.NewIDs(), h.clock,
		h.metrics, h.fp, slog.New(slog.DiscardHandler), application.PlaceOrderConfig{RequestClaimTTL: time.Hour, ScanGrace: time.Second})
	h.orders = application.NewOrderService(h.place, h.queries, h.life)
	h.relay = application.NewRelayOutbox(h.store, h.broker, h.clock, h.fp, slog.New(slog.DiscardHandler),
		application.RelayConfig{Interval: time.Second, Batch: 500, Workers: 4, Retention: time.Hour,
			BackoffBase: 100 * time.Millisecond, BackoffMax: time.Second, CoalesceTimeouts: true, HoldDelayed: true})
	const n = 6
	h.activity(1, n, time.Minute, time.Minute)
	ids := h.buyAll(1, users(1, n))

	if got := len(h.broker.Messages(ports.TopicOrderTimeout)); got != 0 {
		t.Fatalf("%d timeout messages published before their deadline, want 0 (held in the outbox)", got)
	}
	held := `SELECT count(*) FROM event_outbox WHERE topic = 'ORDER_TIMEOUT' AND published_at IS NULL AND attempts = 0`
	if got := h.count(held); got != n {
		t.Fatalf("%d timeout rows held in the outbox with no attempt counted, want %d", got, n)
	}

	h.clock.Advance(30 * time.Second)
	paid := ids[1]
	if _, err := h.orders.PayOrder(context.Background(), paid, "pay-in-time"); err != nil {
		t.Fatal(err)
	}
	h.settle()
	if got := len(h.broker.Messages(ports.TopicOrderTimeout)); got != 0 {
		t.Fatalf("%d timeout messages published half-way to the deadline, want 0", got)
	}

	h.clock.Advance(31 * time.Second)
	h.settle()
	msgs := h.broker.Messages(ports.TopicOrderTimeout)
	if len(msgs) == 0 {
		t.Fatal("no timeout message published after the deadline")
	}
	for _, m := range msgs {
		if !m.DeliverAt.IsZero() {
			t.Fatalf("timeout message %s published with DeliverAt %v, want none", m.MessageID, m.DeliverAt)
		}
	}
	if got := h.count(`SELECT count(*) FROM event_outbox WHERE topic = 'ORDER_TIMEOUT' AND published_at IS NULL`); got != 0 {
		t.Fatalf("%d timeout rows still unpublished after the deadline", got)
	}
	h.timedOutBut(ids, paid)
	h.invariants(1)
}

// timedOutBut fails the test unless every order of ids (by user) was
// canceled by its payment timeout, but paid, which must be paid.
func (h *harness) timedOutBut(ids map[int64]string, paid string) {
	h.t.Helper()
	for user, id := range ids {
		want := order.StatusCanceled
		if id == paid {
			want = order.StatusPaid
		}
		if s := h.orderOf(id); s.Status != want || (want == order.StatusCanceled && s.CancelReason != order.ReasonPaymentTimeout) {
			h.t.Fatalf("order of user %d: %s %q, want %s", user, s.Status, s.CancelReason, want)
		}
	}
}
