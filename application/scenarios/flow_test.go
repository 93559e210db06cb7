package scenarios_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/memory"
	"github.com/seckill-dev/seckill/adapters/testkit/redismem"
	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

func TestPlaceOrderHappyPath(t *testing.T) {
	h := newHarness(t)
	h.activity(1, 10, 15*time.Minute, 5*time.Minute)

	res, err := h.placeOrder(7, 1, req(1))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != ports.OrderQueuing {
		t.Fatalf("status %s", res.Status)
	}
	v, err := h.orders.GetOrder(context.Background(), 7, res.OrderID)
	if err != nil || v.Status != ports.OrderQueuing {
		t.Fatalf("GetOrder while queuing: %+v %v", v, err)
	}
	if _, err := h.orders.GetOrder(context.Background(), 8, res.OrderID); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("another user sees the order: %v", err)
	}
	if got := h.reservationOf(1, res.ReservationID).Status; got != reservation.StatusSent {
		t.Fatalf("reservation %s after confirmed send", got)
	}
	msgs := h.broker.Messages(ports.TopicOrderCreate)
	if len(msgs) != 1 || msgs[0].Tag != message.TagCreateOrder || msgs[0].Keys[0] != res.ReservationID {
		t.Fatalf("order-create messages: %+v", msgs)
	}
	h.settle()
	o := h.orderOf(res.OrderID)
	if o.Status != order.StatusCreated || o.UserID != 7 || !o.ExpiresAt.Equal(start.Add(15*time.Minute)) {
		t.Fatalf("order %+v", o)
	}
	if got := h.reservationOf(1, res.ReservationID).Status; got != reservation.StatusOrdered {
		t.Fatalf("reservation %s after order creation", got)
	}
	v, err = h.orders.GetOrder(context.Background(), 7, res.OrderID)
	if err != nil || v.Status != ports.OrderCreated || v.AggregateVersion != 1 {
		t.Fatalf("GetOrder after creation: %+v %v", v, err)
	}
	if n := len(h.broker.Messages(ports.TopicOrderTimeout)); n != 1 {
		t.Fatalf("timeout messages: %d", n)
	}
	if msgs := h.broker.Messages(ports.TopicOrderStateFIFO); len(msgs) != 1 || msgs[0].MessageGroup != res.OrderID {
		t.Fatalf("state messages: %+v", msgs)
	}
	h.invariants(1)
}

func TestPlaceOrderErrors(t *testing.T) {
	h := newHarness(t)
	h.activity(1, 1, time.Minute, time.Minute)
	if _, err := h.placeOrder(1, 1, req(1)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.placeOrder(1, 1, req(2)); !errors.Is(err, ports.ErrAlreadyPurchased) {
		t.Fatalf("second purchase: %v", err)
	}
	if _, err := h.placeOrder(2, 1, req(3)); !errors.Is(err, ports.ErrSoldOut) {
		t.Fatalf("sold out: %v", err)
	}
	if _, err := h.placeOrder(2, 99, req(4)); !errors.Is(err, ports.ErrActivityNotFound) {
		t.Fatalf("unknown activity: %v", err)
	}
	var fe *ports.FieldError
	if _, err := h.placeOrder(2, 1, ""); !errors.As(err, &fe) || fe.Field != "request_id" {
		t.Fatalf("empty request id: %v", err)
	}
	// The same request_id for another activity is refused.
	h.activity(2, 5, time.Minute, time.Minute)
	if _, err := h.placeOrder(1, 2, req(1)); !errors.Is(err, ports.ErrRequestIDReused) {
		t.Fatalf("reused request id: %v", err)
	}
	h.invariants(1)
}

func TestRepeatedRequestReturnsTheSameIDs(t *testing.T) {
	h := newHarness(t)
	h.activity(1, 10, time.Minute, time.Minute)
	first, err := h.placeOrder(3, 1, "same")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		again, err := h.placeOrder(3, 1, "same")
		if err != nil || again.OrderID != first.OrderID || again.ReservationID != first.ReservationID {
			t.Fatalf("repeat %d: %+v %v", i, again, err)
		}
	}
	h.settle()
	again, err := h.placeOrder(3, 1, "same")
	if err != nil || again.Status != ports.OrderCreated || again.OrderID != first.OrderID {
		t.Fatalf("repeat after creation: %+v %v", again, err)
	}
	if n := len(h.broker.Messages(ports.TopicOrderCreate)); n != 1 {
		t.Fatalf("%d order-create messages for one request", n)
	}
	h.invariants(1)
}

func TestBacklogClosesAdmissionBeforeTouchingStock(t *testing.T) {
	h := newHarness(t)
	h.activity(1, 10, time.Minute, 10*time.Second)
	if _, err := h.placeOrder(1, 1, req(1)); err != nil {
		t.Fatal(err)
	}
	// The consumer is down: the reservation ages past half its validity.
	h.clock.Advance(6 * time.Second)
	h.measure()
	if _, err := h.placeOrder(2, 1, req(2)); !errors.Is(err, ports.ErrBacklog) {
		t.Fatalf("admission with an old backlog: %v", err)
	}
	if got := h.redis.Snapshot().Slots[redismem.SKU{ActivityID: 1, SKUID: 1}].Stock; got != 9 {
		t.Fatalf("stock %d: a refused request touched stock", got)
	}
	h.settle()
	h.measure()
	if _, err := h.placeOrder(2, 1, req(2)); err != nil {
		t.Fatalf("admission after the backlog cleared: %v", err)
	}
	if got := h.metrics.Snapshot().AdmissionRejected["BACKLOG"]; got != 1 {
		t.Fatalf("BACKLOG rejections counted %d", got)
	}
}

func TestUnknownSendIsResentWithTheSameMessageID(t *testing.T) {
	h := newHarness(t)
	h.activity(1, 10, time.Minute, time.Minute)
	// The broker stores the message but the answer is lost, twice (the
	// request's own attempt and its immediate retry).
	h.broker.SetModeFor(ports.TopicOrderCreate, memory.SendUnknown, 2)
	res, err := h.placeOrder(4, 1, req(1))
	if err != nil || res.Status != ports.OrderQueuing {
		t.Fatalf("unknown send must answer QUEUING: %+v %v", res, err)
	}
	if got := h.reservationOf(1, res.ReservationID).Status; got != reservation.StatusPending {
		t.Fatalf("reservation %s after unknown send", got)
	}
	// Nothing is due before the scan grace.
	if n, err := h.scanner.ScanOnce(context.Background()); err != nil || n != 0 {
		t.Fatalf("early scan claimed %d (%v)", n, err)
	}
	h.clock.Advance(2 * time.Second)
	if n, err := h.scanner.ScanOnce(context.Background()); err != nil || n != 1 {
		t.Fatalf("scan claimed %d (%v)", n, err)
	}
	msgs := h.broker.Messages(ports.TopicOrderCreate)
	if len(msgs) != 3 || msgs[0].MessageID != msgs[1].MessageID || msgs[1].MessageID != msgs[2].MessageID {
		t.Fatalf("retry and resend must reuse the message id: %+v", msgs)
	}
	h.settle()
	if n := h.orderCount(); n != 1 {
		t.Fatalf("%d orders from one reservation", n)
	}
	if h.metrics.Snapshot().ResendOutcomes["CONFIRMED"] != 1 {
		t.Fatal("resend outcome not counted")
	}
	h.invariants(1)
}

// TestUnknownSendIsRetriedOnceInTheRequest: one lost answer is retried at
// once with the same message id; the reservation is SENT before the client
// is answered and one order results.
func TestUnknownSendIsRetriedOnceInTheRequest(t *testing.T) {
	h := newHarness(t)
	h.activity(1, 10, time.Minute, time.Minute)
	h.broker.SetModeFor(ports.TopicOrderCreate, memory.SendUnknown, 1)
	res, err := h.placeOrder(4, 1, req(1))
	if err != nil || res.Status != ports.OrderQueuing {
		t.Fatalf("place: %+v %v", res, err)
	}
	if got := h.reservationOf(1, res.ReservationID).Status; got != reservation.StatusSent {
		t.Fatalf("reservation %s after a retried unknown send, want SENT", got)
	}
	msgs := h.broker.Messages(ports.TopicOrderCreate)
	if len(msgs) != 2 || msgs[0].MessageID != msgs[1].MessageID {
		t.Fatalf("the retry must reuse the message id: %+v", msgs)
	}
	h.settle()
	if n := h.orderCount(); n != 1 {
		t.Fatalf("%d orders from one reservation", n)
	}
	h.invariants(1)
}

func TestCrashAfterReserveIsRecoveredByTheScanner(t *testing.T) {
	h := newHarness(t)
	h.activity(1, 10, time.Minute, time.Minute)
	h.fp.SetError(ports.FailAfterReserve, errors.New("crash"))
	if _, err := h.placeOrder(5, 1, req(1)); err == nil {
		t.Fatal("the crashed request must fail")
	}
	h.fp.ClearAll()
	if n := h.broker.Sends(ports.TopicOrderCreate); n != 0 {
		t.Fatalf("%d sends before the crash point", n)
	}
	h.clock.Advance(2 * time.Second)
	if _, err := h.scanner.ScanOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.settle()
	if n := h.orderCount(); n != 1 {
		t.Fatalf("%d orders after recovery", n)
	}
	h.invariants(1)
}

func TestDefiniteSendFailureReleasesOnce(t *testing.T) {
	h := newHarness(t)
	h.activity(1, 3, time.Minute, time.Minute)
	h.broker.SetMode(ports.TopicOrderCreate, memory.SendReject)
	if _, err := h.placeOrder(6, 1, req(1)); !errors.Is(err, ports.ErrTransient) {
		t.Fatalf("definite failure: %v", err)
	}
	slot := h.redis.Snapshot().Slots[redismem.SKU{ActivityID: 1, SKUID: 1}]
	if slot.Stock != 3 || len(slot.Holders) != 0 {
		t.Fatalf("stock %d holders %v after release", slot.Stock, slot.Holders)
	}
	// A retry with the same request id reports the rejection; a new one
	// buys again once the broker is back.
	res, err := h.placeOrder(6, 1, req(1))
	if err != nil || res.Status != ports.OrderRejected {
		t.Fatalf("retry of a released request: %+v %v", res, err)
	}
	h.broker.SetMode(ports.TopicOrderCreate, memory.SendConfirm)
	if _, err := h.placeOrder(6, 1, req(2)); err != nil {
		t.Fatal(err)
	}
	h.settle()
	h.invariants(1)
}

func TestConsumerIdempotency(t *testing.T) {
	h := newHarness(t)
	h.activity(1, 10, time.Minute, time.Minute)
	res, err := h.placeOrder(8, 1, req(1))
	if err != nil {
		t.Fatal(err)
	}
	msg := h.broker.Messages(ports.TopicOrderCreate)[0]
	d := ports.Delivery{Topic: "ORDER_CREATE", Body: msg.Body, DeliveryAttempt: 1}
	// The same message 100 times concurrently (spec 29.2 case 1).
	var wg sync.WaitGroup
	decisions := make([][]ports.Decision, 100)
	for i := range decisions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			decisions[i] = h.create.HandleBatch(context.Background(), []ports.Delivery{d})
		}()
	}
	wg.Wait()
	created := 0
	for _, ds := range decisions {
		if !ds[0].Ack {
			t.Fatalf("not acknowledged: %+v", ds[0])
		}
		if ds[0].Outcome == "created" {
			created++
		}
	}
	if created != 1 {
		t.Fatalf("%d deliveries created the order", created)
	}
	// A different message id for the same reservation (case 2).
	other, err := message.DecodeOrderCreateRequested(msg.Body)
	if err != nil {
		t.Fatal(err)
	}
	other.MessageID = "evt_another"
	body, err := other.Encode()
	if err != nil {
		t.Fatal(err)
	}
	ds := h.create.HandleBatch(context.Background(), []ports.Delivery{{Body: body, DeliveryAttempt: 1}})
	if !ds[0].Ack || ds[0].Outcome != "duplicate" {
		t.Fatalf("same reservation, new message id: %+v", ds[0])
	}
	orders, ledger := h.allOrders(), h.ledger()
	if len(orders) != 1 || len(ledger) != 1 || orders[0].OrderID != res.OrderID {
		t.Fatalf("orders %d ledger %d", len(orders), len(ledger))
	}
	h.settle()
	h.invariants(1)
}

func TestConsumerRejectsAndCompensatesOnce(t *testing.T) {
	h := newHarness(t)
	h.activity(1, 10, time.Minute, 5*time.Second)
	res, err := h.placeOrder(9, 1, req(1))
	if err != nil {
		t.Fatal(err)
	}
	// The message waits in the queue past its validity.
	h.clock.Advance(6 * time.Second)
	h.drain(ports.TopicOrderCreate, groupCreate, h.create, 32)
	rejections := h.strings(`SELECT reason FROM order_rejections ORDER BY order_id`)
	if n := h.orderCount(); n != 0 || len(rejections) != 1 || rejections[0] != string(reservation.ReasonExpired) {
		t.Fatalf("orders %d rejections %v", n, rejections)
	}
	h.settle()
	r := h.reservationOf(1, res.ReservationID)
	if r.Status != reservation.StatusReleased || r.ReleaseReason != reservation.ReasonExpired {
		t.Fatalf("reservation %+v", r)
	}
	v, err := h.orders.GetOrder(context.Background(), 9, res.OrderID)
	if err != nil || v.Status != ports.OrderRejected || v.Reason != "RESERVATION_EXPIRED" {
		t.Fatalf("GetOrder of a rejection: %+v %v", v, err)
	}
	// Deliver the compensation again: no second release (I4).
	release := h.broker.Messages(ports.TopicInventoryCompensate)
	if len(release) != 1 {
		t.Fatalf("compensation messages %d", len(release))
	}
	ds := h.compensate.HandleBatch(context.Background(), []ports.Delivery{{Body: release[0].Body, DeliveryAttempt: 1}})
	if !ds[0].Ack || ds[0].Outcome != "duplicate" {
		t.Fatalf("second compensation: %+v", ds[0])
	}
	if got := h.redis.Snapshot().Slots[redismem.SKU{ActivityID: 1, SKUID: 1}].Stock; got != 10 {
		t.Fatalf("stock %d after one release", got)
	}
	h.invariants(1)
}

func TestMalformedMessagesAreQuarantined(t *testing.T) {
	h := newHarness(t)
	h.activity(1, 10, time.Minute, time.Minute)
	ds := h.create.HandleBatch(context.Background(), []ports.Delivery{
		{Body: []byte(`{not json`), BrokerMessageID: "b1", DeliveryAttempt: 1},
		{Body: []byte(`{"schema_version":9,"event_type":"ORDER_CREATE_REQUESTED","message_id":"m"}`), BrokerMessageID: "b2", DeliveryAttempt: 1},
	})
	for i, d := range ds {
		if !d.Ack || d.Outcome != "quarantined" {
			t.Fatalf("delivery %d: %+v", i, d)
		}
	}
	q := h.strings(`SELECT error_class FROM message_quarantine ORDER BY id`)
	if len(q) != 2 || q[0] != "INVALID_JSON" || q[1] != "UNSUPPORTED_SCHEMA" {
		t.Fatalf("quarantine %v", q)
	}
}

func TestBatchFallsBackToOneByOne(t *testing.T) {
	h := newHarness(t)
	h.activity(1, 10, time.Minute, time.Minute)
	for i := int64(1); i <= 5; i++ {
		if _, err := h.placeOrder(100+i, 1, req(int(i))); err != nil {
			t.Fatal(err)
		}
	}
	// The first transaction (the batch) fails; the per-message ones pass.
	h.store.FailNextClaimInbox(ports.ErrTransient)
	h.drain(ports.TopicOrderCreate, groupCreate, h.create, 32)
	if n := h.orderCount(); n != 5 {
		t.Fatalf("%d orders after fallback", n)
	}
	h.settle()
	h.invariants(1)
}

func TestTransientFailureIsNotAcknowledged(t *testing.T) {
	h := newHarness(t)
	h.activity(1, 10, time.Minute, time.Minute)
	if _, err := h.placeOrder(11, 1, req(1)); err != nil {
		t.Fatal(err)
	}
	msg := h.broker.Messages(ports.TopicOrderCreate)[0]
	h.store.FailNextCommit(ports.ErrTransient)
	ds := h.create.HandleBatch(context.Background(), []ports.Delivery{{Body: msg.Body, DeliveryAttempt: 1}})
	if ds[0].Ack || ds[0].RetryAfter <= 0 {
		t.Fatalf("transient failure decision %+v", ds[0])
	}
	if n := h.orderCount(); n != 0 {
		t.Fatal("a failed commit left an order")
	}
	ds = h.create.HandleBatch(context.Background(), []ports.Delivery{{Body: msg.Body, DeliveryAttempt: 2}})
	if !ds[0].Ack || ds[0].Outcome != "created" {
		t.Fatalf("redelivery: %+v", ds[0])
	}
}

func TestCrashAfterCommitBeforeAck(t *testing.T) {
	h := newHarness(t)
	h.activity(1, 10, time.Minute, time.Minute)
	if _, err := h.placeOrder(12, 1, req(1)); err != nil {
		t.Fatal(err)
	}
	h.fp.SetError(ports.FailConsumerAfterCommit, errors.New("crash"))
	_, _ = h.broker.Deliver(context.Background(), ports.TopicOrderCreate, groupCreate, h.create, 32) // fails by design: the failpoint crashes after commit
	h.fp.ClearAll()
	if n := h.broker.Pending(ports.TopicOrderCreate, groupCreate); n != 1 {
		t.Fatalf("message must stay unacknowledged, pending %d", n)
	}
	h.settle()
	if n := h.orderCount(); n != 1 {
		t.Fatalf("%d orders after redelivery", n)
	}
	h.invariants(1)
}

func TestPayAndCancelRaceHasOneWinner(t *testing.T) {
	h := newHarness(t)
	h.activity(1, 10, time.Minute, time.Minute)
	res, err := h.placeOrder(13, 1, req(1))
	if err != nil {
		t.Fatal(err)
	}
	h.settle()
	var wg sync.WaitGroup
	var mu sync.Mutex
	paid, canceled := 0, 0
	for i := 0; i < 100; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			if _, err := h.orders.PayOrder(context.Background(), res.OrderID, "pay-1"); err == nil {
				mu.Lock()
				paid++
				mu.Unlock()
			} else if !errors.Is(err, ports.ErrOrderNotPayable) {
				t.Errorf("pay: %v", err)
			}
		}()
		go func() {
			defer wg.Done()
			v, err := h.orders.CancelOrder(context.Background(), 13, res.OrderID)
			if err == nil && v.Status == ports.OrderCanceled {
				mu.Lock()
				canceled++
				mu.Unlock()
			} else if err != nil && !errors.Is(err, ports.ErrOrderNotCancelable) {
				t.Errorf("cancel: %v", err)
			}
		}()
	}
	wg.Wait()
	o := h.orderOf(res.OrderID)
	if (o.Status == order.StatusPaid) == (o.Status == order.StatusCanceled) {
		t.Fatalf("final status %s", o.Status)
	}
	if o.Status == order.StatusPaid && canceled != 0 {
		t.Fatalf("paid order, but %d cancels reported success", canceled)
	}
	if o.Status == order.StatusCanceled && paid != 0 {
		t.Fatalf("canceled order, but %d payments reported success", paid)
	}
	h.settle()
	h.invariants(1)
	ledger := 0
	for _, l := range h.ledger() {
		if l.Reason == ports.LedgerOrderCanceled {
			ledger++
		}
	}
	if want := map[bool]int{true: 1, false: 0}[o.Status == order.StatusCanceled]; ledger != want {
		t.Fatalf("cancel ledger rows %d, want %d", ledger, want)
	}
}

func TestPaymentTimeout(t *testing.T) {
	h := newHarness(t)
	h.activity(1, 10, time.Minute, time.Minute)
	paidRes, err := h.placeOrder(20, 1, req(1))
	if err != nil {
		t.Fatal(err)
	}
	unpaidRes, err := h.placeOrder(21, 1, req(2))
	if err != nil {
		t.Fatal(err)
	}
	h.settle()
	if _, err := h.orders.PayOrder(context.Background(), paidRes.OrderID, "p"); err != nil {
		t.Fatal(err)
	}
	// An early timeout check changes nothing and is redelivered later.
	var unpaidTimeout ports.OutboundMessage
	for _, m := range h.broker.Messages(ports.TopicOrderTimeout) {
		if m.Keys[0] == unpaidRes.OrderID {
			unpaidTimeout = m
		}
	}
	ds := h.timeouts.HandleBatch(context.Background(), []ports.Delivery{{Body: unpaidTimeout.Body, DeliveryAttempt: 1}})
	if ds[0].Ack || ds[0].RetryAfter <= 0 {
		t.Fatalf("early check: %+v", ds[0])
	}
	h.clock.Advance(time.Minute + time.Second)
	h.settle()
	if got := h.orderOf(paidRes.OrderID).Status; got != order.StatusPaid {
		t.Fatalf("paid order became %s", got)
	}
	if got := h.orderOf(unpaidRes.OrderID).Status; got != order.StatusCanceled {
		t.Fatalf("unpaid order is %s", got)
	}
	// Late duplicates are no-ops.
	for i := 0; i < 3; i++ {
		ds = h.timeouts.HandleBatch(context.Background(), []ports.Delivery{{Body: unpaidTimeout.Body, DeliveryAttempt: 3}})
		if !ds[0].Ack {
			t.Fatalf("late duplicate: %+v", ds[0])
		}
	}
	slot := h.redis.Snapshot().Slots[redismem.SKU{ActivityID: 1, SKUID: 1}]
	if slot.Stock != 9 {
		t.Fatalf("Redis stock %d: the canceled unit must be back", slot.Stock)
	}
	m := h.metrics.Snapshot()
	if m.CancelOutcomes["CANCELED"] != 1 || m.CancelOutcomes["NOOP_PAID"] != 1 || m.CancelOutcomes["NOOP_NOT_EXPIRED"] != 1 {
		t.Fatalf("cancel outcomes %+v", m.CancelOutcomes)
	}
	h.invariants(1)
}

func TestRelayCrashAfterPublishRepublishesOnce(t *testing.T) {
	h := newHarness(t)
	h.activity(1, 10, time.Minute, time.Minute)
	if _, err := h.placeOrder(30, 1, req(1)); err != nil {
		t.Fatal(err)
	}
	h.drain(ports.TopicOrderCreate, groupCreate, h.create, 32)
	h.fp.SetError(ports.FailRelayAfterPublish, errors.New("crash"))
	if _, err := h.relayOnce(); err == nil {
		t.Fatal("relay must fail at the failpoint")
	}
	h.fp.ClearAll()
	if _, err := h.relayOnce(); err != nil {
		t.Fatal(err)
	}
	msgs := h.broker.Messages(ports.TopicOrderTimeout)
	if len(msgs) != 2 || msgs[0].MessageID != msgs[1].MessageID {
		t.Fatalf("republished timeout messages: %d", len(msgs))
	}
	h.clock.Advance(2 * time.Minute)
	h.settle()
	m := h.metrics.Snapshot()
	if m.CancelOutcomes["CANCELED"] != 1 || m.CancelOutcomes["DUPLICATE"] != 1 {
		t.Fatalf("one cancel and one duplicate expected: %+v", m.CancelOutcomes)
	}
	h.invariants(1)
}

// TestDefiniteFailureAfterUnknownKeepsTheUnit: a send whose outcome was
// unknown may have reached the broker; a later attempt of the same message
// that fails definitely (PlaceOrder's immediate retry, or the scanner's
// resend) must not release the unit, or the first copy's order would sell
// it twice (I1, I6). The first copy becomes the order.
func TestDefiniteFailureAfterUnknownKeepsTheUnit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		modes []memory.SendMode
	}{
		{"placeorder retry", []memory.SendMode{memory.SendUnknown, memory.SendReject}},
		{"scanner resend", []memory.SendMode{memory.SendUnknown, memory.SendLost, memory.SendReject}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.activity(1, 1, time.Minute, time.Minute)
			h.broker.SetModeSequence(ports.TopicOrderCreate, tc.modes...)
			res, err := h.placeOrder(6, 1, req(1))
			if err != nil || res.Status != ports.OrderQueuing {
				t.Fatalf("PlaceOrder: %+v %v, want QUEUING", res, err)
			}
			if len(tc.modes) > 2 {
				h.clock.Advance(2 * time.Second)
				if _, err := h.scanner.ScanOnce(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if got := h.broker.Sends(ports.TopicOrderCreate); got != len(tc.modes) {
				t.Fatalf("%d sends, want %d", got, len(tc.modes))
			}
			if slot := h.redis.Snapshot().Slots[redismem.SKU{ActivityID: 1, SKUID: 1}]; slot.Stock != 0 {
				t.Fatalf("the unit went back (stock %d) although the first copy is in the broker", slot.Stock)
			}
			// Another buyer finds the SKU sold out, and the first copy
			// becomes the one order.
			if _, err := h.placeOrder(7, 1, req(2)); !errors.Is(err, ports.ErrSoldOut) {
				t.Fatalf("second buyer: %v, want sold out", err)
			}
			h.settle()
			if o := h.orderOf(res.OrderID); o.UserID != 6 {
				t.Fatalf("order %+v", o)
			}
			h.invariants(1)
		})
	}
}
