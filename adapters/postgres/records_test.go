package postgres_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

// A rejection is kept once per order and per reservation.
func TestRecordRejectionsKeepsTheFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	r := rejection(newID("ord"))
	again := r
	again.Reason = "RESERVATION_EXPIRED"
	sameRsv := rejection(newID("ord"))
	sameRsv.ReservationID = r.ReservationID
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error { return tx.RecordRejections(ctx, []ports.Rejection{r}) })
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		return tx.RecordRejections(ctx, []ports.Rejection{again, sameRsv, again})
	})
	var reason string
	if err := e.db.QueryRow(testCtx(t), `SELECT reason FROM order_rejections WHERE order_id = $1`, r.OrderID).Scan(&reason); err != nil || reason != r.Reason {
		t.Fatalf("stored reason %q, %v; want the first", reason, err)
	}
	if n := e.count(t, `SELECT count(*) FROM order_rejections`); n != 1 {
		t.Fatalf("%d rejections stored, want 1", n)
	}
}

// GetOrderView shows the projection (PAYING as CREATED), else the
// rejection as REJECTED, else ErrNotFound.
func TestGetOrderView(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	ctx := testCtx(t)
	now := time.Now().UTC().Truncate(time.Microsecond)
	o := newOrder(t, 4, 2, 9, now)
	created := o.Snapshot()
	insertOrders(t, e, created)
	v, err := e.store.GetOrderView(ctx, created.OrderID)
	want := ports.OrderView{OrderID: created.OrderID, ReservationID: created.ReservationID, ActivityID: 4, SKUID: 2,
		UserID: 9, Status: ports.OrderCreated, AggregateVersion: 1, CreatedAt: now, UpdatedAt: now, ExpiresAt: created.ExpiresAt}
	if err != nil || v != want {
		t.Fatalf("view = %+v, %v\nwant %+v", v, err, want)
	}

	if err := o.StartPayment("pay-1", now); err != nil {
		t.Fatal(err)
	}
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		return tx.UpdateOrders(ctx, []order.Snapshot{o.Snapshot()})
	})
	if v, err := e.store.GetOrderView(ctx, created.OrderID); err != nil || v.Status != ports.OrderCreated || v.PaymentID != "pay-1" {
		t.Fatalf("PAYING view = %+v, %v; want CREATED with the payment id", v, err)
	}
	if err := o.Cancel(order.ReasonBuyerCanceled, now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		return tx.UpdateOrders(ctx, []order.Snapshot{o.Snapshot()})
	})
	if v, err := e.store.GetOrderView(ctx, created.OrderID); err != nil || v.Status != ports.OrderCanceled ||
		v.Reason != string(order.ReasonBuyerCanceled) || !v.CanceledAt.Equal(now.Add(time.Second)) {
		t.Fatalf("canceled view = %+v, %v", v, err)
	}

	r := rejection(newID("ord"))
	r.RejectedAt = now
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error { return tx.RecordRejections(ctx, []ports.Rejection{r}) })
	v, err = e.store.GetOrderView(ctx, r.OrderID)
	wantRejected := ports.OrderView{OrderID: r.OrderID, ReservationID: r.ReservationID, ActivityID: 1, SKUID: 1, UserID: 7,
		Status: ports.OrderRejected, Reason: "NO_FINAL_STOCK", CreatedAt: now, UpdatedAt: now}
	if err != nil || v != wantRejected {
		t.Fatalf("rejected view = %+v, %v\nwant %+v", v, err, wantRejected)
	}
	if _, err := e.store.GetOrderView(ctx, "ord_missing"); !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("unknown order: %v, want ErrNotFound", err)
	}
}

// A poison message is quarantined once per (group, broker message id).
func TestQuarantineKeepsOneRowPerBrokerMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	m := ports.QuarantinedMessage{ConsumerGroup: "g", Topic: "ORDER_CREATE", BrokerMessageID: "b-1",
		ErrorClass: "INVALID_JSON", Reason: "unexpected EOF", Body: []byte("{"),
		Properties: map[string]string{"k": "v"}, DeliveryAttempt: 1}
	for attempt := int32(1); attempt <= 2; attempt++ {
		m.DeliveryAttempt = attempt
		e.inTx(t, func(ctx context.Context, tx ports.Tx) error { return tx.Quarantine(ctx, m) })
	}
	other := m
	other.ConsumerGroup = "g2"
	other.MessageID = "evt-1"
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error { return tx.Quarantine(ctx, other) })
	if n := e.count(t, `SELECT count(*) FROM message_quarantine WHERE consumer_group = 'g' AND message_id IS NULL AND delivery_attempt = 1 AND properties->>'k' = 'v'`); n != 1 {
		t.Fatalf("%d quarantine rows for g, want the first delivery only", n)
	}
	if n := e.count(t, `SELECT count(*) FROM message_quarantine`); n != 2 {
		t.Fatalf("%d quarantine rows, want 2", n)
	}
}

// The ledger refuses a second movement of a reservation for one reason.
func TestAppendLedgerRefusesDoubledEffect(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	entry := ports.LedgerEntry{ActivityID: 1, SKUID: 1, Delta: -1, Reason: ports.LedgerOrderCreated,
		OrderID: "ord-1", ReservationID: "rsv-1", MessageID: "evt-1"}
	cancel := entry
	cancel.Delta, cancel.Reason, cancel.MessageID = 1, ports.LedgerOrderCanceled, ""
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		return tx.AppendLedger(ctx, []ports.LedgerEntry{entry, cancel})
	})
	err := e.store.InTx(testCtx(t), func(ctx context.Context, tx ports.Tx) error {
		return tx.AppendLedger(ctx, []ports.LedgerEntry{entry})
	})
	if !errors.Is(err, ports.ErrAlreadyExists) {
		t.Fatalf("doubled ledger entry: %v, want ErrAlreadyExists", err)
	}
	if n := e.count(t, `SELECT count(*) FROM inventory_ledger WHERE message_id IS NULL`); n != 1 {
		t.Fatalf("%d entries without message id, want 1", n)
	}
	if n := e.count(t, `SELECT coalesce(sum(delta), 0) FROM inventory_ledger WHERE reservation_id = 'rsv-1'`); n != 0 {
		t.Fatalf("ledger sum %d, want 0", n)
	}
}

// A reservation is decided once: claims return only undecided ones, in
// input order; concurrent claims of one reservation have one winner.
func TestReservationOutcomes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{MaxConns: 12})
	claims := func(ids ...string) []ports.ReservationClaim {
		out := make([]ports.ReservationClaim, len(ids))
		for i, id := range ids {
			out[i] = ports.ReservationClaim{ReservationID: id, OrderID: "ord-" + id, MessageID: "evt-" + id}
		}
		return out
	}
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		got, err := tx.ClaimReservations(ctx, claims("r2", "r1", "r2"))
		if err != nil || !slices.Equal(got, []string{"r2", "r1"}) {
			t.Errorf("claim = %v, %v", got, err)
		}
		return tx.FinishReservations(ctx, []ports.ReservationOutcome{
			{ReservationID: "r1", Outcome: ports.OutcomeOrdered},
			{ReservationID: "r2", Outcome: ports.OutcomeRejected, Reason: "RESERVATION_EXPIRED"},
		})
	})
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		got, err := tx.ClaimReservations(ctx, claims("r1", "r3"))
		if err != nil || !slices.Equal(got, []string{"r3"}) {
			t.Errorf("second claim = %v, %v", got, err)
		}
		return err
	})
	if n := e.count(t, `SELECT count(*) FROM reservation_outcomes WHERE reservation_id = 'r2' AND status = 'REJECTED' AND reason = 'RESERVATION_EXPIRED'`); n != 1 {
		t.Fatal("r2 not recorded as rejected")
	}
	err := e.store.InTx(testCtx(t), func(ctx context.Context, tx ports.Tx) error {
		return tx.FinishReservations(ctx, []ports.ReservationOutcome{{ReservationID: "never", Outcome: ports.OutcomeOrdered}})
	})
	if !errors.Is(err, ports.ErrNotFound) {
		t.Fatalf("finishing an unclaimed reservation: %v, want ErrNotFound", err)
	}

	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners int
	)
	for range 20 {
		wg.Go(func() {
			err := e.store.InTx(testCtx(t), func(ctx context.Context, tx ports.Tx) error {
				got, err := tx.ClaimReservations(ctx, claims("hot"))
				if len(got) == 1 {
					mu.Lock()
					winners++
					mu.Unlock()
				}
				return err
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if winners != 1 {
		t.Fatalf("%d transactions claimed the reservation, want 1", winners)
	}
}
