package application_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

// swallow acknowledges every delivery without any effect: the broker
// lost the message (a consumer that died holding it and was never handed
// it again).
type swallow struct{}

func (swallow) HandleBatch(_ context.Context, ds []ports.Delivery) []ports.Decision {
	out := make([]ports.Decision, len(ds))
	for i := range ds {
		out[i] = ports.Acked("lost")
	}
	return out
}

// TestReconcileResendsASentMessageTheBrokerNeverHandedBack: a reservation
// the broker confirmed but whose message never reached the consumer is,
// after the grace, published again with its original message id by the
// reconciler; the order is created once and I1-I7 hold. A reservation
// still within the grace is left alone.
func TestReconcileResendsASentMessageTheBrokerNeverHandedBack(t *testing.T) {
	h := newHarness(t)
	h.activity(90, 5, time.Hour, time.Hour)
	res, err := h.placeOrder(1, 90, "lost-1")
	if err != nil {
		t.Fatal(err)
	}
	if n := h.drain(ports.TopicOrderCreate, groupCreate, swallow{}, 32); n != 1 {
		t.Fatalf("swallowed %d messages, want the one order-create message", n)
	}
	ctx := context.Background()
	rep, err := h.reconciler.Reconcile(ctx, ports.ActorReconciler)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Resent != 0 {
		t.Fatalf("resent %d within the grace", rep.Resent)
	}
	h.clock.Advance(2 * time.Second) // past the harness's 1 s grace
	rep, err = h.reconciler.Reconcile(ctx, ports.ActorReconciler)
	if err != nil {
		t.Fatal(err)
	}
	if rep.SentNotConsumed != 1 || rep.Resent != 1 {
		t.Fatalf("report %+v: want the sent, unconsumed reservation resent once", rep)
	}
	h.settle()
	if o := h.orderOf(res.OrderID); o.OrderID != res.OrderID {
		t.Fatalf("order %s not created after the resend", res.OrderID)
	}
	h.invariants(90)
}
