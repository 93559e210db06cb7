package scenarios_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

func TestReconcileDecidesAnExpiredLostReservationOnce(t *testing.T) {
	h := newHarness(t)
	h.activity(1, 5, time.Minute, 5*time.Second)
	h.fp.SetError(ports.FailAfterReserve, errors.New("crash"))
	res, err := h.placeOrder(1, 1, req(1))
	if err == nil {
		t.Fatal("crashed request succeeded")
	}
	h.fp.ClearAll()
	_ = res
	rep, err := h.reconciler.StockReport(context.Background(), 1, 1)
	if err != nil || rep.PendingReservations != 1 || rep.Drift() != 0 {
		t.Fatalf("before: %+v %v", rep, err)
	}
	// Still valid: left to the scanner.
	h.clock.Advance(2 * time.Second)
	r1, err := h.reconciler.Reconcile(context.Background(), ports.ActorReconciler)
	if err != nil || r1.PendingSend != 1 || r1.RejectedExpired != 0 {
		t.Fatalf("first pass: %+v %v", r1, err)
	}
	// Past validity + grace: rejected in PostgreSQL and released once.
	h.clock.Advance(5 * time.Second)
	r2, err := h.reconciler.Reconcile(context.Background(), ports.ActorReconciler)
	if err != nil || r2.RejectedExpired != 1 {
		t.Fatalf("second pass: %+v %v", r2, err)
	}
	// A late message for it cannot create the order any more.
	h.clock.Advance(time.Second)
	if n, err := h.scanner.ScanOnce(context.Background()); err != nil || n != 0 {
		t.Fatalf("scanner after reconcile: %d %v", n, err)
	}
	h.settle()
	if n := h.orderCount(); n != 0 {
		t.Fatalf("%d orders", n)
	}
	rep, err = h.reconciler.StockReport(context.Background(), 1, 1)
	if err != nil || rep.RedisAvailable != 5 || rep.Drift() != 0 || rep.PendingReservations != 0 {
		t.Fatalf("after: %+v %v", rep, err)
	}
	if r3, err := h.reconciler.Reconcile(context.Background(), ports.ActorReconciler); err != nil || r3.RejectedExpired+r3.Released != 0 {
		t.Fatalf("third pass repaired again: %+v %v", r3, err)
	}
}

func TestReconcileRepairsMissingWriteBackAndLostTimeout(t *testing.T) {
	h := newHarness(t)
	h.activity(1, 5, time.Minute, time.Minute)
	res, err := h.placeOrder(2, 1, req(1))
	if err != nil {
		t.Fatal(err)
	}
	h.redis.FailOn("MarkOrdered", errors.New("redis blip"))
	h.drain(ports.TopicOrderCreate, groupCreate, h.create, 32)
	h.redis.ClearFaults()
	if got := h.reservationOf(1, res.ReservationID).Status; got != reservation.StatusSent {
		t.Fatalf("reservation %s: the write-back was supposed to fail", got)
	}
	h.clock.Advance(2 * time.Second)
	rep, err := h.reconciler.Reconcile(context.Background(), ports.ActorReconciler)
	if err != nil || rep.RepairedOrdered != 1 {
		t.Fatalf("write-back repair: %+v %v", rep, err)
	}
	// The timeout message is lost: the order stays unpaid past its deadline.
	h.clock.Advance(2 * time.Minute)
	rep, err = h.reconciler.Reconcile(context.Background(), ports.ActorReconciler)
	if err != nil || rep.CanceledExpired != 1 {
		t.Fatalf("lost timeout: %+v %v", rep, err)
	}
	h.settle()
	h.invariants(1)
}

func TestPoisonMessageReplayAfterFix(t *testing.T) {
	h := newHarness(t)
	now := start
	m := message.OrderCreateRequested{Envelope: message.Envelope{SchemaVersion: 1, EventType: message.TypeOrderCreateRequested,
		MessageID: "evt_p", MessageKey: "rsv_p", CreatedAt: now}, RequestID: "r", ReservationID: "rsv_p", OrderID: "ord_p",
		ActivityID: 9, SKUID: 1, UserID: 1, Quantity: 1, ReservationCreatedAt: now, ReservationValidUntil: now.Add(time.Hour)}
	body, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	ds := h.create.HandleBatch(context.Background(), []ports.Delivery{{Body: body, DeliveryAttempt: 1, Properties: map[string]string{"message_id": "evt_p"}}})
	if !ds[0].Ack || ds[0].Reason != "UNKNOWN_ACTIVITY" {
		t.Fatalf("poison decision %+v", ds[0])
	}
	page, err := h.admin.ListDeadLetters(context.Background(), "", 10, "")
	if err != nil || len(page.DeadLetters) != 1 || page.DeadLetters[0].ErrorClass != "UNKNOWN_ACTIVITY" {
		t.Fatalf("dead letters %+v %v", page, err)
	}
	id := page.DeadLetters[0].ID
	if err := h.deadLetters.MeasureGauge(context.Background()); err != nil {
		t.Fatal(err)
	}
	if g := h.metrics.Snapshot().DeadLetters; g.Count != 1 {
		t.Fatalf("open dead letters gauge %+v", g)
	}
	if _, err := h.admin.ReplayDeadLetter(context.Background(), "ops", id, "early"); !errors.Is(err, ports.ErrReplayRefused) {
		t.Fatalf("replay before the fix: %v", err)
	}
	h.activity(9, 3, time.Minute, time.Hour)
	r, err := h.admin.ReplayDeadLetter(context.Background(), "ops", id, "fixed")
	if err != nil || r.Outcome != "REPLAYED" || r.ReplayCount != 1 {
		t.Fatalf("replay: %+v %v", r, err)
	}
	msgs := h.broker.Messages(ports.TopicOrderCreate)
	replayed, err := message.DecodeOrderCreateRequested(msgs[len(msgs)-1].Body)
	if err != nil || replayed.MessageID != "evt_p" || replayed.ReplayCount != 1 || replayed.ReplayID != r.ReplayID {
		t.Fatalf("replayed message %+v %v", replayed.Envelope, err)
	}
	h.settle()
	r2, err := h.admin.ReplayDeadLetter(context.Background(), "ops", id, "again")
	if err != nil || r2.Outcome != "SKIPPED_ALREADY_APPLIED" {
		t.Fatalf("second replay: %+v %v", r2, err)
	}
	if n := h.orderCount(); n != 1 {
		t.Fatalf("orders %d", n)
	}
	if got := h.metrics.Snapshot().ReplayOutcomes; got["REPLAYED"] != 1 || got["SKIPPED_ALREADY_APPLIED"] != 1 || got["REFUSED"] != 1 {
		t.Fatalf("replay outcomes %v", got)
	}
}

func TestProjectionAppliesOnlyNewerVersionsAndFillsGaps(t *testing.T) {
	h := newHarness(t)
	h.activity(1, 5, time.Minute, time.Minute)
	res, err := h.placeOrder(3, 1, req(1))
	if err != nil {
		t.Fatal(err)
	}
	h.drain(ports.TopicOrderCreate, groupCreate, h.create, 32)
	if _, err := h.relayOnce(); err != nil {
		t.Fatal(err)
	}
	if _, err := h.orders.PayOrder(context.Background(), res.OrderID, "p"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.relayOnce(); err != nil {
		t.Fatal(err)
	}
	states := h.broker.Messages(ports.TopicOrderStateFIFO)
	if len(states) != 2 {
		t.Fatalf("state messages %d", len(states))
	}
	// Deliver the newest first (the view has nothing: a gap) and then the
	// older one: the view ends at version 3 and never moves back.
	for _, m := range []ports.OutboundMessage{states[1], states[0], states[1]} {
		ds := h.projection.HandleBatch(context.Background(), []ports.Delivery{{Body: m.Body, DeliveryAttempt: 1}})
		if !ds[0].Ack {
			t.Fatalf("decision %+v", ds[0])
		}
	}
	v, err := h.redis.OrderViews().Get(context.Background(), res.OrderID)
	if err != nil || v.Status != ports.OrderPaid || v.AggregateVersion != 3 {
		t.Fatalf("view %+v %v", v, err)
	}
	n, err := h.projection.Rebuild(context.Background())
	if err != nil || n != 1 {
		t.Fatalf("rebuild %d %v", n, err)
	}
}

// lostDeliveries acknowledges every delivery without running it: a broker
// that handed the messages to a consumer that died before it could.
type lostDeliveries struct{}

func (lostDeliveries) HandleBatch(_ context.Context, ds []ports.Delivery) []ports.Decision {
	out := make([]ports.Decision, len(ds))
	for i := range ds {
		out[i] = ports.Acked("lost")
	}
	return out
}

// TestReconcileReleasesAUnitWhoseReleaseTaskWasLost: a canceled order's
// release task never takes effect (the broker lost it); the unit stays
// held in Redis, a release in flight. Within the grace the reconciler
// leaves it to the task; past the grace it releases the unit once, and the
// task arriving after all gives nothing back a second time (I4).
func TestReconcileReleasesAUnitWhoseReleaseTaskWasLost(t *testing.T) {
	h := newHarness(t)
	h.activity(1, 5, time.Minute, time.Minute)
	res, err := h.placeOrder(4, 1, req(1))
	if err != nil {
		t.Fatal(err)
	}
	h.drain(ports.TopicOrderCreate, groupCreate, h.create, 32)
	if _, err := h.orders.CancelOrder(context.Background(), 4, res.OrderID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.relayOnce(); err != nil {
		t.Fatal(err)
	}
	if n := h.drain(ports.TopicInventoryCompensate, groupCompensate, lostDeliveries{}, 16); n != 1 {
		t.Fatalf("%d release tasks lost, want 1", n)
	}
	rep, err := h.reconciler.StockReport(context.Background(), 1, 1)
	if err != nil || rep.ReleasesInFlight != 1 || rep.RedisAvailable != 4 || rep.Drift() != 0 {
		t.Fatalf("after the lost task: %+v %v", rep, err)
	}
	if r1, err := h.reconciler.Reconcile(context.Background(), ports.ActorReconciler); err != nil || r1.Released != 0 {
		t.Fatalf("pass within the grace: %+v %v", r1, err)
	}
	h.clock.Advance(2 * time.Second)
	if r2, err := h.reconciler.Reconcile(context.Background(), ports.ActorReconciler); err != nil || r2.Released != 1 {
		t.Fatalf("pass past the grace: %+v %v", r2, err)
	}
	if got := h.reservationOf(1, res.ReservationID); got.Status != reservation.StatusReleased ||
		got.ReleaseReason != reservation.ReasonOrderCanceled {
		t.Fatalf("reservation after the pass: %s %s", got.Status, got.ReleaseReason)
	}
	// The task, delivered after all, is a duplicate.
	release := h.broker.Messages(ports.TopicInventoryCompensate)
	ds := h.compensate.HandleBatch(context.Background(), []ports.Delivery{{Body: release[0].Body, DeliveryAttempt: 2}})
	if !ds[0].Ack || ds[0].Outcome != "duplicate" {
		t.Fatalf("late task: %+v", ds[0])
	}
	if r3, err := h.reconciler.Reconcile(context.Background(), ports.ActorReconciler); err != nil || r3.Released != 0 {
		t.Fatalf("third pass released again: %+v %v", r3, err)
	}
	rep, err = h.reconciler.StockReport(context.Background(), 1, 1)
	if err != nil || rep.ReleasesInFlight != 0 || rep.RedisAvailable != 5 || rep.Drift() != 0 {
		t.Fatalf("at rest: %+v %v", rep, err)
	}
	h.settle()
	h.invariants(1)
}
