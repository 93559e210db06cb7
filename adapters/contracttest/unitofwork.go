package contracttest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

// UnitOfWorkFactory returns a fresh, empty unit of work and the order
// queries reading the same database. It is called once per subtest and
// registers its own cleanup with t.
type UnitOfWorkFactory func(t *testing.T) (ports.UnitOfWork, ports.OrderQueries)

// UnitOfWork runs the contract suite of ports.UnitOfWork, every store of
// ports.Tx, ports.ReservationOutcomeStore (which the Tx must implement) and
// ports.OrderQueries:
//
//   - Now: non-zero and fixed within a transaction;
//   - Inbox: claim semantics (input order, repeated ids once, committed ids
//     not returned, groups independent, concurrent claims of one id: one
//     winner), FinishInbox and InboxStatusOf;
//   - Orders: InsertOrders conflicts per rule (order id, reservation id,
//     one non-canceled order per user and SKU, within one call too), a
//     canceled order freeing the slot, UpdateOrders applying only newer
//     versions, OrdersByReservation, GetOrderView of orders;
//   - Events: appends, ErrConcurrencyConflict for a repeated or gapped
//     version, all-or-nothing calls, concurrent appends of one version
//     (one winner), LoadOrderEvents;
//   - Stock: TakeStock never below zero and returning what it took,
//     ReturnStock, concurrent takes;
//   - Ledger: duplicate (reservation, reason) fails, in a later
//     transaction or within one call;
//   - Outbox: append, claim oldest first with increasing ids and the
//     messages read back, limit, DeferOutbox (attempts and due time),
//     HoldOutbox (due time only),
//     MarkPublished, PruneOutbox;
//   - Rejections (the first kept, visible as REJECTED views), Quarantine
//     (storing twice succeeds), Activities (create once, get);
//   - Reservation outcomes: claim-once semantics, concurrent claims;
//   - Dead letters: first arrival, later arrival (error, attempts and
//     last-seen updated, payload kept, reopened), a repeated broker message
//     changing nothing, replay and resolve marks, pages newest first by
//     group, stats of the open ones, ErrNotFound for unknown ids,
//     concurrent first arrivals (one row, one creator);
//   - Admin audit: entries read back (params as JSON decodes them, At =
//     the transaction's Now), pages by id, own entries visible, rollback,
//     invalid entries refused, concurrent appends;
//   - Audit queries: AuditStock (I6 terms, held reservations classified),
//     CanceledReservations (of one SKU),
//     ReservationStates (every id, input order, PROCESSING undecided),
//     StaleReleases (held ids PostgreSQL released before a cutoff: canceled
//     order, rejection or REJECTED outcome, input order, once each),
//     ExpiredUnpaidOrders, OrderStreams and Rejections pages in id order,
//     ListActivities;
//   - Rollback: nothing of a transaction whose callback fails or panics
//     persists.
func UnitOfWork(t *testing.T, factory UnitOfWorkFactory) {
	t.Run("Now", func(t *testing.T) { testNow(t, factory) })
	t.Run("Inbox", func(t *testing.T) { testInbox(t, factory) })
	t.Run("InboxConcurrentClaims", func(t *testing.T) { testInboxConcurrent(t, factory) })
	t.Run("InsertOrders", func(t *testing.T) { testInsertOrders(t, factory) })
	t.Run("Events", func(t *testing.T) { testEvents(t, factory) })
	t.Run("EventsConcurrentAppend", func(t *testing.T) { testEventsConcurrent(t, factory) })
	t.Run("Stock", func(t *testing.T) { testStock(t, factory) })
	t.Run("Ledger", func(t *testing.T) { testLedger(t, factory) })
	t.Run("Outbox", func(t *testing.T) { testOutbox(t, factory) })
	t.Run("Rejections", func(t *testing.T) { testRejections(t, factory) })
	t.Run("Quarantine", func(t *testing.T) { testQuarantine(t, factory) })
	t.Run("Activities", func(t *testing.T) { testActivities(t, factory) })
	t.Run("ListActivities", func(t *testing.T) { testListActivities(t, factory) })
	t.Run("ReservationOutcomes", func(t *testing.T) { testOutcomes(t, factory) })
	t.Run("DeadLetters", func(t *testing.T) { testDeadLetters(t, factory) })
	t.Run("DeadLettersConcurrent", func(t *testing.T) { testDeadLettersConcurrent(t, factory) })
	t.Run("AdminAudit", func(t *testing.T) { testAdminAudit(t, factory) })
	t.Run("AuditStock", func(t *testing.T) { testAuditStock(t, factory) })
	t.Run("ReservationStates", func(t *testing.T) { testReservationStates(t, factory) })
	t.Run("StaleReleases", func(t *testing.T) { testStaleReleases(t, factory) })
	t.Run("ExpiredUnpaidOrders", func(t *testing.T) { testExpiredUnpaidOrders(t, factory) })
	t.Run("PaymentIDConfirmsOneOrder", func(t *testing.T) { testPaymentIDConfirmsOneOrder(t, factory) })
	t.Run("OrderStreams", func(t *testing.T) { testOrderStreams(t, factory) })
	t.Run("RejectionPages", func(t *testing.T) { testRejectionPages(t, factory) })
	t.Run("RollbackOnError", func(t *testing.T) { testRollback(t, factory, false) })
	t.Run("RollbackOnPanic", func(t *testing.T) { testRollback(t, factory, true) })
}

// txDo runs fn in one transaction and fails the test when InTx fails.
// Callbacks report failed expectations by returning errors.
func txDo(t *testing.T, uow ports.UnitOfWork, fn func(ctx context.Context, tx ports.Tx) error) {
	t.Helper()
	if err := uow.InTx(t.Context(), fn); err != nil {
		t.Fatalf("transaction: %v", err)
	}
}

// testActivity returns a valid activity with random ids.
func testActivity(stock int64) ports.Activity {
	return ports.Activity{
		ActivityID: randomID(), SKUID: randomID(), Stock: stock,
		StartsAt: baseTime, EndsAt: baseTime.Add(2 * time.Hour),
		PaymentTimeout: 15 * time.Minute, ReservationTTL: 5 * time.Minute,
		UnitPrice: 1999, Currency: "EUR",
	}
}

// newOrder creates an order aggregate with random ids for the user of the
// activity SKU.
func newOrder(t *testing.T, activityID, skuID, userID int64) *order.Order {
	t.Helper()
	id := uniq()
	o, err := order.Create(order.NewOrder{
		OrderID: "ord_" + id, ReservationID: "rsv_" + id, MessageID: "evt_" + id,
		ActivityID: activityID, SKUID: skuID, UserID: userID, Quantity: 1,
		ReservedAt: baseTime, PaymentTimeout: 15 * time.Minute,
	}, baseTime.Add(time.Second))
	noErr(t, "create order", err)
	return o
}

func testNow(t *testing.T, factory UnitOfWorkFactory) {
	uow, _ := factory(t)
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		n1, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		n2, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		if n1.IsZero() || !n1.Equal(n2) {
			return fmt.Errorf("Now returned %v then %v; want one non-zero transaction time", n1, n2)
		}
		return nil
	})
}

func testStock(t *testing.T, factory UnitOfWorkFactory) {
	uow, _ := factory(t)
	a := testActivity(3)
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		_, _, err := tx.CreateActivity(ctx, a)
		return err
	})
	take := func(n int64) int64 {
		t.Helper()
		var got int64
		txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
			var err error
			got, err = tx.TakeStock(ctx, a.ActivityID, a.SKUID, n)
			return err
		})
		return got
	}
	for i, step := range []struct{ n, want int64 }{{2, 2}, {2, 1}, {1, 0}} {
		if got := take(step.n); got != step.want {
			t.Fatalf("take %d: TakeStock(%d) = %d, want %d", i, step.n, got, step.want)
		}
	}
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		return tx.ReturnStock(ctx, a.ActivityID, a.SKUID, 1)
	})
	if got := take(5); got != 1 {
		t.Fatalf("TakeStock(5) after returning 1 = %d, want 1", got)
	}
	if got := take(1); got != 0 {
		t.Fatalf("TakeStock(1) on empty stock = %d, want 0", got)
	}

	// Concurrent takes never grant more than the stock.
	b := testActivity(3)
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		_, _, err := tx.CreateActivity(ctx, b)
		return err
	})
	granted := make([]int64, 6)
	errs := make([]error, 6)
	parallel(6, func(i int) {
		errs[i] = uow.InTx(t.Context(), func(ctx context.Context, tx ports.Tx) error {
			var err error
			granted[i], err = tx.TakeStock(ctx, b.ActivityID, b.SKUID, 1)
			return err
		})
	})
	var sum int64
	for i := range granted {
		noErr(t, "concurrent TakeStock", errs[i])
		sum += granted[i]
	}
	if sum != 3 {
		t.Fatalf("6 concurrent TakeStock(1) on stock 3 granted %d in total, want 3", sum)
	}
}

func testLedger(t *testing.T, factory UnitOfWorkFactory) {
	uow, _ := factory(t)
	a := testActivity(5)
	id := uniq()
	created := ports.LedgerEntry{
		ActivityID: a.ActivityID, SKUID: a.SKUID, Delta: -1, Reason: ports.LedgerOrderCreated,
		OrderID: "ord_" + id, ReservationID: "rsv_" + id, MessageID: "evt_" + id,
	}
	appendLedger := func(entries ...ports.LedgerEntry) error {
		return uow.InTx(t.Context(), func(ctx context.Context, tx ports.Tx) error {
			return tx.AppendLedger(ctx, entries)
		})
	}
	noErr(t, "first ledger entry", appendLedger(created))
	again := created
	again.MessageID = "evt_" + uniq()
	if err := appendLedger(again); err == nil {
		t.Fatal("AppendLedger repeating (reservation, reason) of a committed entry succeeded; want an error")
	}
	canceled := created
	canceled.Reason, canceled.Delta, canceled.MessageID = ports.LedgerOrderCanceled, 1, ""
	noErr(t, "same reservation, other reason", appendLedger(canceled))

	id2 := uniq()
	other := created
	other.OrderID, other.ReservationID, other.MessageID = "ord_"+id2, "rsv_"+id2, "evt_"+id2
	if err := appendLedger(other, other); err == nil {
		t.Fatal("AppendLedger with one (reservation, reason) twice in the call succeeded; want an error")
	}
	noErr(t, "entry of the failed call, alone", appendLedger(other))
}

func testActivities(t *testing.T, factory UnitOfWorkFactory) {
	uow, _ := factory(t)
	a := testActivity(10)
	var (
		stored  ports.Activity
		created bool
	)
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		var err error
		stored, created, err = tx.CreateActivity(ctx, a)
		return err
	})
	if !created || !sameActivity(stored, a) {
		t.Fatalf("CreateActivity = %+v, created %v; want %+v, true", stored, created, a)
	}
	changed := a
	changed.Stock, changed.EndsAt = 99, a.EndsAt.Add(time.Hour)
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		var err error
		stored, created, err = tx.CreateActivity(ctx, changed)
		return err
	})
	if created || !sameActivity(stored, a) {
		t.Fatalf("CreateActivity of existing ids = %+v, created %v; want the stored %+v, false", stored, created, a)
	}
	var (
		got      ports.Activity
		granted  int64
		errUnkwn error
	)
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		var err error
		if got, err = tx.GetActivity(ctx, a.ActivityID, a.SKUID); err != nil {
			return err
		}
		_, errUnkwn = tx.GetActivity(ctx, a.ActivityID, a.SKUID+1)
		granted, err = tx.TakeStock(ctx, a.ActivityID, a.SKUID, 1000)
		return err
	})
	if !sameActivity(got, a) {
		t.Fatalf("GetActivity = %+v, want %+v", got, a)
	}
	wantErr(t, "GetActivity of an unknown activity", errUnkwn, ports.ErrNotFound)
	if granted != a.Stock {
		t.Fatalf("final stock after CreateActivity twice = %d, want the first stock %d", granted, a.Stock)
	}
}

func sameActivity(a, b ports.Activity) bool {
	return a.ActivityID == b.ActivityID && a.SKUID == b.SKUID && a.Stock == b.Stock &&
		a.StartsAt.Equal(b.StartsAt) && a.EndsAt.Equal(b.EndsAt) &&
		a.PaymentTimeout == b.PaymentTimeout && a.ReservationTTL == b.ReservationTTL &&
		a.UnitPrice == b.UnitPrice && a.Currency == b.Currency
}

// errRollback is returned by callbacks that must roll back.
var errRollback = errors.New("contracttest: roll back")
