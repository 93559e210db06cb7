package scenarios_test

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/testkit/redismem"
	"github.com/seckill-dev/seckill/application"
	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// countingUoW counts the transactions run through it; with stale set, the
// first transaction reads that order's stream as it was before its last
// staleEvents events (a read that happened just before a racing command
// committed).
type countingUoW struct {
	ports.UnitOfWork
	txs         atomic.Int64
	stale       string
	staleEvents int
}

func (u *countingUoW) InTx(ctx context.Context, fn func(ctx context.Context, tx ports.Tx) error) error {
	n := u.txs.Add(1)
	return u.UnitOfWork.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		if n == 1 && u.stale != "" {
			tx = staleTx{Tx: tx, orderID: u.stale, drop: u.staleEvents}
		}
		return fn(ctx, tx)
	})
}

// staleTx hides the newest drop events of one order's stream.
type staleTx struct {
	ports.Tx
	orderID string
	drop    int
}

func (s staleTx) LoadOrderEvents(ctx context.Context, orderID string) ([]order.Event, error) {
	events, err := s.Tx.LoadOrderEvents(ctx, orderID)
	if err != nil || orderID != s.orderID {
		return events, err
	}
	return events[:len(events)-s.drop], nil
}

// timeoutHandler wires a payment-timeout handler whose transactions go
// through u.
func (h *harness) timeoutHandler(u *countingUoW) *application.CancelExpiredOrders {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	life := application.NewOrderLifecycle(u, log, application.CompensationPolicy{MaxAttempts: 5, Window: time.Hour})
	return application.NewCancelExpiredOrders(life, u, h.metrics, log, groupTimeout)
}

// buyAll places one order per user of users in activity and lets every
// order be created; it returns the order ids by user.
func (h *harness) buyAll(activity int64, users []int64) map[int64]string {
	h.t.Helper()
	ids := map[int64]string{}
	for _, u := range users {
		res, err := h.placeOrder(u, activity, req(int(activity*1000+u)))
		if err != nil {
			h.t.Fatal(err)
		}
		ids[u] = res.OrderID
	}
	h.settle()
	for u, id := range ids {
		if got := h.orderOf(id).Status; got != order.StatusCreated {
			h.t.Fatalf("order of user %d is %s, want CREATED", u, got)
		}
	}
	return ids
}

// timeoutDeliveries returns the relayed payment-timeout messages as first
// deliveries, keyed by order id.
func (h *harness) timeoutDeliveries() map[string]ports.Delivery {
	out := map[string]ports.Delivery{}
	for _, m := range h.broker.Messages(ports.TopicOrderTimeout) {
		out[m.Keys[0]] = ports.Delivery{Topic: "ORDER_TIMEOUT", Body: m.Body, DeliveryAttempt: 1}
	}
	return out
}

func users(from, n int64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = from + int64(i)
	}
	return out
}

// TestTimeoutWaveLeavesPaidAndBuyerCanceledAlone: 40 orders expire at the
// same moment; one was paid at the last moment before its deadline and one
// was canceled by its buyer. The wave is handled in one transaction per
// received batch; exactly those two orders are left alone, every other
// unit is released once, and redelivering the whole wave (timeouts and
// compensations) changes nothing.
func TestTimeoutWaveLeavesPaidAndBuyerCanceledAlone(t *testing.T) {
	h := newHarness(t)
	const n = 40
	h.activity(1, n, time.Minute, time.Minute)
	ids := h.buyAll(1, users(1, n))
	paid, buyerCanceled := ids[1], ids[2]

	// The last moment before the deadline: the payment side confirms one
	// order and a buyer cancels another.
	h.clock.Advance(time.Minute - time.Millisecond)
	if _, err := h.orders.PayOrder(context.Background(), paid, "pay-last-moment"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.orders.CancelOrder(context.Background(), 2, buyerCanceled); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(time.Millisecond)

	u := &countingUoW{UnitOfWork: h.store}
	if got := h.drain(ports.TopicOrderTimeout, groupTimeout, h.timeoutHandler(u), 32); got != n {
		t.Fatalf("%d timeout messages handled, want %d", got, n)
	}
	if got := u.txs.Load(); got != 2 {
		t.Fatalf("%d transactions for %d timeout messages in batches of 32, want 2 (one per batch)", got, n)
	}
	h.settle()

	for user, id := range ids {
		o := h.orderOf(id)
		want, reason := order.StatusCanceled, order.ReasonPaymentTimeout
		switch user {
		case 1:
			want, reason = order.StatusPaid, ""
		case 2:
			reason = order.ReasonBuyerCanceled
		}
		if o.Status != want || o.CancelReason != reason {
			t.Fatalf("order of user %d: %s %q, want %s %q", user, o.Status, o.CancelReason, want, reason)
		}
	}
	slot := h.redis.Snapshot().Slots[redismem.SKU{ActivityID: 1, SKUID: 1}]
	for _, r := range slot.Reservations {
		want := reservation.StatusReleased
		if r.Snapshot.OrderID == paid {
			want = reservation.StatusOrdered
		}
		if r.Snapshot.Status != want {
			t.Fatalf("reservation of order %s is %s, want %s", r.Snapshot.OrderID, r.Snapshot.Status, want)
		}
	}
	if slot.Stock != n-1 || len(slot.Holders) != 1 || slot.Holders[1] == "" {
		t.Fatalf("Redis stock %d holders %v, want %d units back and only the payer holding one", slot.Stock, slot.Holders, n-1)
	}
	released := map[string]int{}
	for _, l := range h.ledger() {
		if l.Reason == ports.LedgerOrderCanceled {
			released[l.OrderID]++
		}
	}
	if len(released) != n-1 || released[paid] != 0 {
		t.Fatalf("cancel ledger covers %d orders (paid order: %d rows), want %d, the paid one not", len(released), released[paid], n-1)
	}
	for id, c := range released {
		if c != 1 {
			t.Fatalf("order %s returned its unit %d times", id, c)
		}
	}
	m := h.metrics.Snapshot()
	if m.CancelOutcomes["CANCELED"] != n-2 || m.CancelOutcomes["NOOP_PAID"] != 1 || m.CancelOutcomes["NOOP_CANCELED"] != 1 {
		t.Fatalf("cancel outcomes %v, want %d CANCELED, 1 NOOP_PAID, 1 NOOP_CANCELED", m.CancelOutcomes, n-2)
	}
	if m.CompensationApplied[true] != n-1 || m.CompensationApplied[false] != 0 {
		t.Fatalf("compensations %v, want %d applied, none duplicate", m.CompensationApplied, n-1)
	}
	h.invariants(1)

	// The whole wave once more, as late duplicates in single batches.
	var again []ports.Delivery
	for _, d := range h.timeoutDeliveries() {
		d.DeliveryAttempt = 2
		again = append(again, d)
	}
	for i, d := range h.timeouts.HandleBatch(context.Background(), again) {
		if !d.Ack || d.Outcome != "duplicate" {
			t.Fatalf("redelivered timeout %d: %+v, want an acknowledged duplicate", i, d)
		}
	}
	var releases []ports.Delivery
	for _, msg := range h.broker.Messages(ports.TopicInventoryCompensate) {
		releases = append(releases, ports.Delivery{Topic: "INVENTORY_COMPENSATE", Body: msg.Body, DeliveryAttempt: 2})
	}
	if len(releases) != n-1 {
		t.Fatalf("%d compensation tasks, want %d", len(releases), n-1)
	}
	for i, d := range h.compensate.HandleBatch(context.Background(), releases) {
		if !d.Ack || d.Outcome != "duplicate" {
			t.Fatalf("redelivered compensation %d: %+v, want an acknowledged duplicate", i, d)
		}
	}
	if got := h.redis.Snapshot().Slots[redismem.SKU{ActivityID: 1, SKUID: 1}].Stock; got != n-1 {
		t.Fatalf("Redis stock %d after redelivering the wave, want %d", got, n-1)
	}
	h.invariants(1)
}

// TestTimeoutBatchLosingARaceFallsBackOneByOne: the batch transaction read
// an order just before a payment committed (simulated by a stale read of
// its stream), so its append conflicts; the batch is rolled back and every
// message is checked alone: the paid order stays paid, the others are
// canceled once.
func TestTimeoutBatchLosingARaceFallsBackOneByOne(t *testing.T) {
	h := newHarness(t)
	const n = 10
	h.activity(1, n, time.Minute, time.Minute)
	ids := h.buyAll(1, users(1, n))
	h.clock.Advance(time.Minute - time.Millisecond)
	if _, err := h.orders.PayOrder(context.Background(), ids[3], "pay-racing"); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(time.Millisecond)

	// PaymentStarted and Paid are hidden from the batch's first read.
	u := &countingUoW{UnitOfWork: h.store, stale: ids[3], staleEvents: 2}
	var ds []ports.Delivery
	for _, d := range h.timeoutDeliveries() {
		ds = append(ds, d)
	}
	decisions := h.timeoutHandler(u).HandleBatch(context.Background(), ds)
	for i, d := range decisions {
		m, err := message.DecodeCancelOrderIfUnpaid(ds[i].Body)
		if err != nil {
			t.Fatal(err)
		}
		want := "canceled"
		if m.OrderID == ids[3] {
			want = "noop"
		}
		if !d.Ack || d.Outcome != want {
			t.Fatalf("decision for order %s: %+v, want acknowledged %s", m.OrderID, d, want)
		}
	}
	if got := u.txs.Load(); got != 1+n {
		t.Fatalf("%d transactions, want %d (the failed batch, then one per message)", got, 1+n)
	}
	if got := h.orderOf(ids[3]).Status; got != order.StatusPaid {
		t.Fatalf("the paid order became %s", got)
	}
	h.settle()
	if got := h.redis.Snapshot().Slots[redismem.SKU{ActivityID: 1, SKUID: 1}].Stock; got != n-1 {
		t.Fatalf("Redis stock %d, want %d", got, n-1)
	}
	h.invariants(1)
}

// TestTimeoutBatchWithEarlyRepeatedAndMalformedMessages: one batch mixes
// checks past their deadline with checks before it (another activity's
// longer payment timeout), a message repeated within the batch and an
// undecodable one. The due orders are canceled in one committed
// transaction; the early checks write nothing (no inbox row) and are
// redelivered after their deadline, when they cancel; the repeat is a
// duplicate and the malformed message is quarantined.
func TestTimeoutBatchWithEarlyRepeatedAndMalformedMessages(t *testing.T) {
	h := newHarness(t)
	h.activity(1, 5, time.Minute, time.Hour)
	h.activity(2, 3, 2*time.Minute, time.Hour)
	due := h.buyAll(1, users(1, 5))
	later := h.buyAll(2, users(11, 3))
	h.clock.Advance(time.Minute)
	byOrder := h.timeoutDeliveries()

	var ds []ports.Delivery
	for _, id := range due {
		ds = append(ds, byOrder[id])
	}
	for _, id := range later {
		ds = append(ds, byOrder[id])
	}
	ds = append(ds, byOrder[due[1]], ports.Delivery{Topic: "ORDER_TIMEOUT", Body: []byte(`{"schema_version":1`),
		BrokerMessageID: "junk", DeliveryAttempt: 1})
	u := &countingUoW{UnitOfWork: h.store}
	decisions := h.timeoutHandler(u).HandleBatch(context.Background(), ds)
	canceled, duplicates := 0, 0
	for i, d := range decisions {
		switch {
		case i < 5 && d.Ack && d.Outcome == "canceled":
			canceled++
		case i >= 5 && i < 8:
			if d.Ack || d.Outcome != "early" || d.RetryAfter < 59*time.Second || d.RetryAfter > 61*time.Second {
				t.Fatalf("early check %d: %+v, want a retry after the deadline (60s + 1s)", i, d)
			}
		case i == 8 && d.Ack && d.Outcome == "duplicate":
			duplicates++
		case i == 9:
			if !d.Ack || d.Outcome != "quarantined" {
				t.Fatalf("malformed message: %+v, want quarantined", d)
			}
		default:
			t.Fatalf("decision %d: %+v", i, d)
		}
	}
	if canceled != 5 || duplicates != 1 {
		t.Fatalf("canceled %d duplicates %d, want 5 and 1", canceled, duplicates)
	}
	// One attempt found the early checks and was rolled back; the second
	// committed the due ones. The quarantine has its own transaction.
	if got := u.txs.Load(); got != 3 {
		t.Fatalf("%d transactions, want 3 (rolled-back attempt, batch, quarantine)", got)
	}
	for _, id := range later {
		if n := h.count(`SELECT count(*) FROM consumer_inbox WHERE consumer_group = $1 AND order_id = $2`, groupTimeout, id); n != 0 {
			t.Fatalf("an early check left %d inbox rows for order %s", n, id)
		}
	}
	for _, id := range later {
		if got := h.orderOf(id).Status; got != order.StatusCreated {
			t.Fatalf("order %s is %s before its deadline", id, got)
		}
	}

	h.clock.Advance(time.Minute)
	ds = ds[:0]
	for _, id := range later {
		d := byOrder[id]
		d.DeliveryAttempt = 2
		ds = append(ds, d)
	}
	for i, d := range h.timeoutHandler(u).HandleBatch(context.Background(), ds) {
		if !d.Ack || d.Outcome != "canceled" {
			t.Fatalf("redelivered early check %d: %+v, want canceled", i, d)
		}
	}
	h.settle()
	for _, id := range later {
		if got := h.orderOf(id).Status; got != order.StatusCanceled {
			t.Fatalf("order %s is %s after its deadline", id, got)
		}
	}
	h.invariants(1)
	h.invariants(2)
	for _, a := range []int64{1, 2} {
		slot := h.redis.Snapshot().Slots[redismem.SKU{ActivityID: a, SKUID: 1}]
		if slot.Stock != slot.Activity.Stock {
			t.Fatalf("activity %d: Redis stock %d, want all %d units back", a, slot.Stock, slot.Activity.Stock)
		}
	}
}

// TestCompensationBatchMixesOutcomes: one batch of compensation tasks over
// two activity SKUs with a task repeated, a reservation Redis does not
// know, and a malformed task: each reservation is released once, the
// repeat is a duplicate, the unknown one and the malformed one are
// quarantined; a Redis failure leaves the whole batch for a retry.
func TestCompensationBatchMixesOutcomes(t *testing.T) {
	h := newHarness(t)
	h.activity(1, 3, time.Minute, time.Hour)
	h.activity(2, 3, time.Minute, time.Hour)
	a := h.buyAll(1, users(1, 2))
	b := h.buyAll(2, users(1, 2))
	for _, c := range []struct {
		user int64
		id   string
	}{{1, a[1]}, {2, a[2]}, {1, b[1]}} {
		if _, err := h.orders.CancelOrder(context.Background(), c.user, c.id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.relayOnce(); err != nil {
		t.Fatal(err)
	}
	var ds []ports.Delivery
	for _, m := range h.broker.Messages(ports.TopicInventoryCompensate) {
		ds = append(ds, ports.Delivery{Topic: "INVENTORY_COMPENSATE", Body: m.Body, DeliveryAttempt: 1})
	}
	if len(ds) != 3 {
		t.Fatalf("%d compensation tasks, want 3", len(ds))
	}
	unknown, err := message.DecodeReleaseReservation(ds[0].Body)
	if err != nil {
		t.Fatal(err)
	}
	unknown.MessageID, unknown.ReservationID = "evt_rsv_unknown_release_1", "rsv_unknown"
	body, err := unknown.Encode()
	if err != nil {
		t.Fatal(err)
	}
	ds = append(ds, ds[1],
		ports.Delivery{Topic: "INVENTORY_COMPENSATE", Body: body, BrokerMessageID: "b-unknown", DeliveryAttempt: 1},
		ports.Delivery{Topic: "INVENTORY_COMPENSATE", Body: []byte(`not json`), BrokerMessageID: "b-junk", DeliveryAttempt: 1})

	h.redis.Inject("ReleaseMany", redismem.Fault{Err: ports.ErrTransient, Times: 1})
	for i, d := range h.compensate.HandleBatch(context.Background(), ds[:4]) {
		if d.Ack || d.RetryAfter <= 0 {
			t.Fatalf("task %d while Redis fails: %+v, want a retry", i, d)
		}
	}
	want := []string{"released", "released", "released", "duplicate", "quarantined", "quarantined"}
	for i, d := range h.compensate.HandleBatch(context.Background(), ds) {
		if !d.Ack || d.Outcome != want[i] {
			t.Fatalf("task %d: %+v, want acknowledged %s", i, d, want[i])
		}
	}
	if q := h.strings(`SELECT broker_message_id FROM message_quarantine ORDER BY id`); len(q) != 2 {
		t.Fatalf("quarantine %v, want the unknown reservation and the malformed task", q)
	}
	for _, act := range []int64{1, 2} {
		slot := h.redis.Snapshot().Slots[redismem.SKU{ActivityID: act, SKUID: 1}]
		if want := map[int64]int64{1: 3, 2: 2}[act]; slot.Stock != want {
			t.Fatalf("activity %d: Redis stock %d, want %d", act, slot.Stock, want)
		}
	}
	h.settle()
	h.invariants(1)
	h.invariants(2)
}
