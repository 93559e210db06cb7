package contracttest

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

// orderCreatedAt creates an order aggregate with the given id, created at
// created with a 15 minute payment timeout.
func orderCreatedAt(t *testing.T, orderID string, activityID, skuID, userID int64, created time.Time) *order.Order {
	t.Helper()
	o, err := order.Create(order.NewOrder{
		OrderID: orderID, ReservationID: "rsv_" + orderID, MessageID: "evt_" + orderID,
		ActivityID: activityID, SKUID: skuID, UserID: userID, Quantity: 1,
		ReservedAt: created.Add(-time.Second), PaymentTimeout: 15 * time.Minute,
	}, created)
	noErr(t, "create order", err)
	return o
}

// saveOrder stores a new order (projection row and events); mutate, when
// not nil, changes it first (pay, cancel) and the projection is updated.
func saveOrder(t *testing.T, uow ports.UnitOfWork, o *order.Order, mutate func(o *order.Order) error) order.Snapshot {
	t.Helper()
	created := o.Snapshot()
	if mutate != nil {
		noErr(t, "change order "+created.OrderID, mutate(o))
	}
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		inserted, err := tx.InsertOrders(ctx, []order.Snapshot{created})
		if err != nil {
			return err
		}
		if !slices.Equal(inserted, []bool{true}) {
			return fmt.Errorf("order %s not inserted", created.OrderID)
		}
		if err := tx.AppendEvents(ctx, o.Changes()); err != nil {
			return err
		}
		return tx.UpdateOrders(ctx, []order.Snapshot{o.Snapshot()})
	})
	return o.Snapshot()
}

func cancelOrder(o *order.Order) error {
	return o.Cancel(order.ReasonBuyerCanceled, baseTime.Add(time.Minute))
}

// payOrder and startPayment act one minute after the order's creation,
// well before its deadline.
func payOrder(o *order.Order) error {
	return o.Pay("pay-"+uniq(), o.Snapshot().CreatedAt.Add(time.Minute))
}

func startPayment(o *order.Order) error {
	return o.StartPayment("pay-"+uniq(), o.Snapshot().CreatedAt.Add(time.Minute))
}

// decide claims a reservation and records its outcome.
func decide(ctx context.Context, tx ports.Tx, reservationID, outcome, reason string) error {
	if _, err := tx.ClaimReservations(ctx, []ports.ReservationClaim{{ReservationID: reservationID,
		OrderID: "ord_" + reservationID, MessageID: "evt_" + reservationID}}); err != nil {
		return err
	}
	return tx.FinishReservations(ctx, []ports.ReservationOutcome{{ReservationID: reservationID, Outcome: outcome, Reason: reason}})
}

func rejectionOf(reservationID, reason string, activityID, skuID int64) ports.Rejection {
	id := uniq()
	return ports.Rejection{OrderID: "ord_" + id, ReservationID: reservationID, MessageID: "evt_" + id,
		ActivityID: activityID, SKUID: skuID, UserID: 99, Reason: reason, RejectedAt: baseTime}
}

func testAuditStock(t *testing.T, factory UnitOfWorkFactory) {
	uow, _ := factory(t)
	a := testActivity(10)
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		if _, _, err := tx.CreateActivity(ctx, a); err != nil {
			return err
		}
		_, err := tx.TakeStock(ctx, a.ActivityID, a.SKUID, 3)
		return err
	})
	ordered := saveOrder(t, uow, orderCreatedAt(t, "ord_"+uniq(), a.ActivityID, a.SKUID, 1, baseTime), nil)
	saveOrder(t, uow, orderCreatedAt(t, "ord_"+uniq(), a.ActivityID, a.SKUID, 2, baseTime), payOrder)
	canceled := saveOrder(t, uow, orderCreatedAt(t, "ord_"+uniq(), a.ActivityID, a.SKUID, 3, baseTime), cancelOrder)
	saveOrder(t, uow, orderCreatedAt(t, "ord_"+uniq(), a.ActivityID, a.SKUID+1, 1, baseTime), nil) // other SKU
	rejected, outcomeOnly, unknown := "rsv_r"+uniq(), "rsv_o"+uniq(), "rsv_u"+uniq()
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		if err := decide(ctx, tx, rejected, ports.OutcomeRejected, "NO_FINAL_STOCK"); err != nil {
			return err
		}
		if err := tx.RecordRejections(ctx, []ports.Rejection{rejectionOf(rejected, "NO_FINAL_STOCK", a.ActivityID, a.SKUID)}); err != nil {
			return err
		}
		return decide(ctx, tx, outcomeOnly, ports.OutcomeRejected, "RECONCILED_EXPIRED")
	})

	held := []string{unknown, canceled.ReservationID, ordered.ReservationID, rejected, ordered.ReservationID, outcomeOnly}
	var got, empty ports.StockAudit
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		var err error
		if got, err = tx.AuditStock(ctx, a.ActivityID, a.SKUID, held); err != nil {
			return err
		}
		empty, err = tx.AuditStock(ctx, a.ActivityID, a.SKUID, nil)
		return err
	})
	wantOrdered := []string{ordered.ReservationID}
	wantReleased := []string{canceled.ReservationID, rejected, outcomeOnly}
	if got.InitialStock != 10 || got.PGFinalStock != 7 || got.NonCanceledOrders != 2 ||
		!slices.Equal(got.OrderedHeld, wantOrdered) || !slices.Equal(got.ReleasedHeld, wantReleased) {
		t.Fatalf("AuditStock = %+v\nwant initial 10, final 7, 2 non-canceled orders, ordered %v, released %v",
			got, wantOrdered, wantReleased)
	}
	if empty.InitialStock != 10 || empty.PGFinalStock != 7 || empty.NonCanceledOrders != 2 ||
		len(empty.OrderedHeld) != 0 || len(empty.ReleasedHeld) != 0 {
		t.Fatalf("AuditStock without held reservations = %+v", empty)
	}
	err := uow.InTx(t.Context(), func(ctx context.Context, tx ports.Tx) error {
		_, err := tx.AuditStock(ctx, a.ActivityID, a.SKUID+7, held)
		return err
	})
	wantErr(t, "AuditStock of an unknown activity SKU", err, ports.ErrNotFound)

	// The canceled orders' reservations, of this SKU only.
	var canceledIDs []string
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		var err error
		canceledIDs, err = tx.CanceledReservations(ctx, a.ActivityID, a.SKUID)
		return err
	})
	if !slices.Equal(canceledIDs, []string{canceled.ReservationID}) {
		t.Fatalf("CanceledReservations = %v, want %v", canceledIDs, []string{canceled.ReservationID})
	}
}

func testReservationStates(t *testing.T, factory UnitOfWorkFactory) {
	uow, _ := factory(t)
	act, sku := randomID(), randomID()
	ordered := orderCreatedAt(t, "ord_"+uniq(), act, sku, 1, baseTime)
	canceled := orderCreatedAt(t, "ord_"+uniq(), act, sku, 2, baseTime)
	orderOnly := orderCreatedAt(t, "ord_"+uniq(), act, sku, 3, baseTime)
	rsvOrdered, rsvCanceled := ordered.Snapshot().ReservationID, canceled.Snapshot().ReservationID
	rejected, rejectionOnly, unknown, processing := "rsv_r"+uniq(), "rsv_j"+uniq(), "rsv_u"+uniq(), "rsv_p"+uniq()
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		if err := decide(ctx, tx, rsvOrdered, ports.OutcomeOrdered, ""); err != nil {
			return err
		}
		if err := decide(ctx, tx, rsvCanceled, ports.OutcomeOrdered, ""); err != nil {
			return err
		}
		if err := decide(ctx, tx, rejected, ports.OutcomeRejected, "NO_FINAL_STOCK"); err != nil {
			return err
		}
		return tx.RecordRejections(ctx, []ports.Rejection{
			rejectionOf(rejected, "NO_FINAL_STOCK", act, sku),
			rejectionOf(rejectionOnly, "RESERVATION_EXPIRED", act, sku),
		})
	})
	saveOrder(t, uow, ordered, nil)
	saveOrder(t, uow, canceled, cancelOrder)
	saveOrder(t, uow, orderOnly, payOrder)

	ids := []string{unknown, rsvOrdered, rejected, processing, rsvOrdered, rejectionOnly, orderOnly.Snapshot().ReservationID, rsvCanceled}
	want := []ports.ReservationState{
		{ReservationID: unknown},
		{ReservationID: rsvOrdered, Outcome: ports.OutcomeOrdered, OrderStatus: order.StatusCreated},
		{ReservationID: rejected, Outcome: ports.OutcomeRejected, Reason: "NO_FINAL_STOCK"},
		{ReservationID: processing},
		{ReservationID: rsvOrdered, Outcome: ports.OutcomeOrdered, OrderStatus: order.StatusCreated},
		{ReservationID: rejectionOnly, Outcome: ports.OutcomeRejected, Reason: "RESERVATION_EXPIRED"},
		{ReservationID: orderOnly.Snapshot().ReservationID, Outcome: ports.OutcomeOrdered, OrderStatus: order.StatusPaid},
		{ReservationID: rsvCanceled, Outcome: ports.OutcomeOrdered, OrderStatus: order.StatusCanceled},
	}
	var got, none []ports.ReservationState
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		// A reservation claimed by this transaction is still undecided.
		if _, err := tx.ClaimReservations(ctx, []ports.ReservationClaim{{ReservationID: processing,
			OrderID: "ord_" + processing, MessageID: "evt_" + processing}}); err != nil {
			return err
		}
		var err error
		if got, err = tx.ReservationStates(ctx, ids); err != nil {
			return err
		}
		none, err = tx.ReservationStates(ctx, nil)
		return err
	})
	if !slices.Equal(got, want) {
		t.Fatalf("ReservationStates(%v) =\n%+v\nwant\n%+v", ids, got, want)
	}
	if len(none) != 0 {
		t.Fatalf("ReservationStates(nil) = %+v, want nothing", none)
	}
}

func testStaleReleases(t *testing.T, factory UnitOfWorkFactory) {
	uow, _ := factory(t)
	act, sku := randomID(), randomID()
	live := saveOrder(t, uow, orderCreatedAt(t, "ord_"+uniq(), act, sku, 1, baseTime), nil)
	canceled := saveOrder(t, uow, orderCreatedAt(t, "ord_"+uniq(), act, sku, 2, baseTime), cancelOrder) // at baseTime + 1m
	paid := saveOrder(t, uow, orderCreatedAt(t, "ord_"+uniq(), act, sku, 3, baseTime), payOrder)
	rejected, outcomeOnly, unknown := "rsv_r"+uniq(), "rsv_o"+uniq(), "rsv_u"+uniq()
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		if err := decide(ctx, tx, outcomeOnly, ports.OutcomeRejected, "NO_FINAL_STOCK"); err != nil {
			return err
		}
		return tx.RecordRejections(ctx, []ports.Rejection{rejectionOf(rejected, "RESERVATION_EXPIRED", act, sku)}) // at baseTime
	})
	held := []string{unknown, live.ReservationID, canceled.ReservationID, rejected, paid.ReservationID, outcomeOnly, canceled.ReservationID}
	stale := func(cutoff time.Time) []ports.StaleRelease {
		var out []ports.StaleRelease
		txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
			var err error
			out, err = tx.StaleReleases(ctx, held, cutoff)
			return err
		})
		return out
	}
	got := stale(baseTime.Add(2 * time.Minute))
	if len(got) != 3 || got[0].ReservationID != canceled.ReservationID || got[1].ReservationID != rejected || got[2].ReservationID != outcomeOnly {
		t.Fatalf("StaleReleases past every release = %+v, want the canceled order's, the rejected and the REJECTED outcome's, in input order, once each", got)
	}
	if c := got[0]; !c.Canceled || c.UserID != 2 || c.Reason != "" || !c.ReleasedAt.Equal(baseTime.Add(time.Minute)) {
		t.Errorf("canceled order's stale release %+v, want canceled, user 2, released at %v", c, baseTime.Add(time.Minute))
	}
	if r := got[1]; r.Canceled || r.UserID != 99 || r.Reason != "RESERVATION_EXPIRED" || !r.ReleasedAt.Equal(baseTime) {
		t.Errorf("rejection's stale release %+v, want user 99, RESERVATION_EXPIRED at %v", r, baseTime)
	}
	if o := got[2]; o.Canceled || o.UserID != 0 || o.Reason != "NO_FINAL_STOCK" {
		t.Errorf("REJECTED outcome's stale release %+v, want user 0, NO_FINAL_STOCK", o)
	}
	// A cutoff before the cancellation leaves the canceled order out.
	got = stale(baseTime.Add(30 * time.Second))
	for _, s := range got {
		if s.ReservationID == canceled.ReservationID {
			t.Fatalf("StaleReleases before the cancellation = %+v: the order was canceled after the cutoff", got)
		}
	}
	if len(got) == 0 || got[0].ReservationID != rejected {
		t.Fatalf("StaleReleases before the cancellation = %+v, want the rejection first", got)
	}
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		none, err := tx.StaleReleases(ctx, nil, baseTime)
		if err == nil && len(none) != 0 {
			t.Errorf("StaleReleases(nil) = %+v, want nothing", none)
		}
		return err
	})
}

func testExpiredUnpaidOrders(t *testing.T, factory UnitOfWorkFactory) {
	uow, _ := factory(t)
	act, sku := randomID(), randomID()
	t0 := baseTime
	save := func(user int64, created time.Time, mutate func(*order.Order) error) order.Snapshot {
		return saveOrder(t, uow, orderCreatedAt(t, "ord_"+uniq(), act, sku, user, created), mutate)
	}
	// Deadlines are created + 15 minutes.
	e1 := save(1, t0, nil)                               // CREATED, due t0+15m
	e2 := save(2, t0.Add(-10*time.Minute), startPayment) // PAYING, due t0+5m
	save(3, t0.Add(-20*time.Minute), payOrder)           // PAID: never expired
	save(4, t0.Add(-30*time.Minute), cancelOrder)        // CANCELED: never expired
	save(5, t0.Add(time.Hour), nil)                      // due later
	e6 := save(6, t0, nil)                               // CREATED, due t0+15m like e1
	tied := []string{e1.OrderID, e6.OrderID}
	slices.Sort(tied)

	cases := []struct {
		cutoff time.Time
		limit  int
		want   []string
	}{
		{t0.Add(30 * time.Minute), 10, append([]string{e2.OrderID}, tied...)},
		{t0.Add(30 * time.Minute), 2, []string{e2.OrderID, tied[0]}},
		{t0.Add(15 * time.Minute), 10, []string{e2.OrderID}}, // deadline == cutoff is not before it
		{t0.Add(5 * time.Minute), 10, nil},
		{t0.Add(30 * time.Minute), 0, nil},
	}
	for _, c := range cases {
		var got []string
		txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
			var err error
			got, err = tx.ExpiredUnpaidOrders(ctx, c.cutoff, c.limit)
			return err
		})
		if !slices.Equal(got, c.want) {
			t.Fatalf("ExpiredUnpaidOrders(%v, %d) = %v, want %v", c.cutoff, c.limit, got, c.want)
		}
	}
}

func testOrderStreams(t *testing.T, factory UnitOfWorkFactory) {
	uow, _ := factory(t)
	act, sku, prefix := randomID(), randomID(), "ord_"+uniq()+"_"
	saved := []order.Snapshot{
		saveOrder(t, uow, orderCreatedAt(t, prefix+"1", act, sku, 1, baseTime), nil),
		saveOrder(t, uow, orderCreatedAt(t, prefix+"2", act, sku, 2, baseTime), cancelOrder),
		saveOrder(t, uow, orderCreatedAt(t, prefix+"3", act, sku, 3, baseTime), payOrder),
	}
	wantLen := []int{1, 2, 3} // created; created, canceled; created, payment started, paid
	read := func(after string, limit int) [][]order.Event {
		t.Helper()
		var got [][]order.Event
		txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
			var err error
			got, err = tx.OrderStreams(ctx, after, limit)
			return err
		})
		return got
	}
	var streams [][]order.Event
	for after := ""; ; {
		page := read(after, 2)
		if len(page) == 0 {
			break
		}
		if len(page) > 2 {
			t.Fatalf("OrderStreams(%q, 2) returned %d streams", after, len(page))
		}
		streams = append(streams, page...)
		after = page[len(page)-1][0].OrderID
	}
	if len(streams) != len(saved) {
		t.Fatalf("OrderStreams pages returned %d streams, want %d", len(streams), len(saved))
	}
	for i, evs := range streams {
		want := saved[i]
		if len(evs) != wantLen[i] || evs[0].OrderID != want.OrderID {
			t.Fatalf("stream %d: %d events of %s, want %d of %s", i, len(evs), evs[0].OrderID, wantLen[i], want.OrderID)
		}
		for j, e := range evs {
			if e.Version != int64(j+1) || e.Payload == nil || e.Payload.EventType() != e.Type {
				t.Fatalf("stream %s event %d = %+v: want version %d with a decoded payload", want.OrderID, j, e, j+1)
			}
		}
		o, err := order.Rehydrate(evs)
		noErr(t, "rehydrate "+want.OrderID, err)
		if got := o.Snapshot(); got.Status != want.Status || got.Version != want.Version {
			t.Fatalf("rehydrated %s: status %s version %d, want %s %d", want.OrderID, got.Status, got.Version, want.Status, want.Version)
		}
	}
	if got := read("", 0); len(got) != 0 {
		t.Fatalf("OrderStreams with limit 0 returned %d streams", len(got))
	}
}

func testRejectionPages(t *testing.T, factory UnitOfWorkFactory) {
	uow, _ := factory(t)
	prefix := "ord_" + uniq() + "_"
	var want []ports.Rejection
	for i := range 3 {
		r := rejectionOf("rsv_"+uniq(), "NO_FINAL_STOCK", randomID(), randomID())
		r.OrderID, r.UserID, r.RejectedAt = fmt.Sprintf("%s%d", prefix, i), int64(i+1), baseTime.Add(time.Duration(i)*time.Second)
		want = append(want, r)
	}
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		return tx.RecordRejections(ctx, []ports.Rejection{want[2], want[0], want[1]})
	})
	read := func(after string, limit int) []ports.Rejection {
		t.Helper()
		var got []ports.Rejection
		txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
			var err error
			got, err = tx.Rejections(ctx, after, limit)
			return err
		})
		return got
	}
	pages := [][]ports.Rejection{read("", 2), read(want[1].OrderID, 2), read(want[2].OrderID, 2), read("", 0)}
	wantPages := [][]ports.Rejection{want[:2], want[2:], nil, nil}
	for i := range pages {
		if !slices.EqualFunc(pages[i], wantPages[i], sameRejection) {
			t.Fatalf("Rejections page %d = %+v, want %+v", i, pages[i], wantPages[i])
		}
	}
}

func sameRejection(a, b ports.Rejection) bool {
	return a.OrderID == b.OrderID && a.ReservationID == b.ReservationID && a.MessageID == b.MessageID &&
		a.ActivityID == b.ActivityID && a.SKUID == b.SKUID && a.UserID == b.UserID && a.Reason == b.Reason &&
		a.RejectedAt.Equal(b.RejectedAt)
}

func testListActivities(t *testing.T, factory UnitOfWorkFactory) {
	uow, _ := factory(t)
	a1, a2 := testActivity(5), testActivity(7)
	a3 := a1
	a3.SKUID, a3.Stock = a1.SKUID+1, 9
	var empty, got []ports.Activity
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		var err error
		if empty, err = tx.ListActivities(ctx); err != nil {
			return err
		}
		for _, a := range []ports.Activity{a3, a2, a1} {
			if _, _, err := tx.CreateActivity(ctx, a); err != nil {
				return err
			}
		}
		got, err = tx.ListActivities(ctx)
		return err
	})
	if len(empty) != 0 {
		t.Fatalf("ListActivities of an empty store = %+v", empty)
	}
	want := []ports.Activity{a1, a2, a3}
	slices.SortFunc(want, func(x, y ports.Activity) int {
		return cmp.Or(cmp.Compare(x.ActivityID, y.ActivityID), cmp.Compare(x.SKUID, y.SKUID))
	})
	if !slices.EqualFunc(got, want, sameActivity) {
		t.Fatalf("ListActivities = %+v\nwant %+v", got, want)
	}
}
