package contracttest

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

func testInsertOrders(t *testing.T, factory UnitOfWorkFactory) {
	uow, queries := factory(t)
	a, s := randomID(), randomID()
	const u1, u2 = 7, 8
	o1 := newOrder(t, a, s, u1)
	insert := func(orders ...order.Snapshot) []bool {
		t.Helper()
		var got []bool
		txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
			var err error
			got, err = tx.InsertOrders(ctx, orders)
			return err
		})
		return got
	}
	if got := insert(o1.Snapshot()); !slices.Equal(got, []bool{true}) {
		t.Fatalf("InsertOrders of a new order = %v, want [true]", got)
	}

	with := func(o *order.Order, f func(*order.Snapshot)) order.Snapshot {
		s := o.Snapshot()
		f(&s)
		return s
	}
	sameID := with(newOrder(t, a, s, u2), func(x *order.Snapshot) { x.OrderID = o1.Snapshot().OrderID })
	sameRsv := with(newOrder(t, a, s, u2), func(x *order.Snapshot) { x.ReservationID = o1.Snapshot().ReservationID })
	sameUser := newOrder(t, a, s, u1).Snapshot()
	otherSKU := newOrder(t, a, s+1, u1).Snapshot()
	otherUser := newOrder(t, a, s, u2).Snapshot()
	sameUserInCall := newOrder(t, a, s, u2).Snapshot()
	got := insert(sameID, sameRsv, sameUser, otherSKU, otherUser, sameUserInCall)
	want := []bool{false, false, false, true, true, false}
	if !slices.Equal(got, want) {
		t.Fatalf("InsertOrders(same order id, same reservation, same user and SKU, other SKU, other user, "+
			"same user as the previous row) = %v, want %v", got, want)
	}

	var byRsv map[string]string
	unknown := "rsv_" + uniq()
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		var err error
		byRsv, err = tx.OrdersByReservation(ctx, []string{o1.Snapshot().ReservationID, otherSKU.ReservationID, unknown})
		return err
	})
	wantMap := map[string]string{
		o1.Snapshot().ReservationID: o1.Snapshot().OrderID,
		otherSKU.ReservationID:      otherSKU.OrderID,
	}
	if !maps.Equal(byRsv, wantMap) {
		t.Fatalf("OrdersByReservation = %v, want %v", byRsv, wantMap)
	}

	view, err := queries.GetOrderView(t.Context(), o1.Snapshot().OrderID)
	noErr(t, "GetOrderView", err)
	checkOrderView(t, view, o1.Snapshot(), ports.OrderCreated)

	// A canceled order frees the user's slot; older versions never
	// overwrite newer ones.
	v1 := o1.Snapshot()
	noErr(t, "cancel", o1.Cancel(order.ReasonBuyerCanceled, baseTime.Add(time.Minute)))
	v2 := o1.Snapshot()
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		return tx.UpdateOrders(ctx, []order.Snapshot{v2})
	})
	if got := insert(newOrder(t, a, s, u1).Snapshot()); !slices.Equal(got, []bool{true}) {
		t.Fatalf("InsertOrders for a user whose order was canceled = %v, want [true]", got)
	}
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		return tx.UpdateOrders(ctx, []order.Snapshot{v1})
	})
	view, err = queries.GetOrderView(t.Context(), v2.OrderID)
	noErr(t, "GetOrderView after updates", err)
	checkOrderView(t, view, v2, ports.OrderCanceled)

	_, err = queries.GetOrderView(t.Context(), "ord_"+uniq())
	wantErr(t, "GetOrderView of an unknown order", err, ports.ErrNotFound)
}

// checkOrderView compares a view with the snapshot it shows.
func checkOrderView(t *testing.T, v ports.OrderView, o order.Snapshot, status ports.OrderStatus) {
	t.Helper()
	if v.OrderID != o.OrderID || v.ReservationID != o.ReservationID || v.ActivityID != o.ActivityID ||
		v.SKUID != o.SKUID || v.UserID != o.UserID || v.Status != status ||
		v.AggregateVersion != o.Version || !v.ExpiresAt.Equal(o.ExpiresAt) {
		t.Fatalf("order view %+v does not show %s of %+v", v, status, o)
	}
}

func testEvents(t *testing.T, factory UnitOfWorkFactory) {
	uow, _ := factory(t)
	o := newOrder(t, randomID(), randomID(), 1)
	id := o.Snapshot().OrderID
	appendEvents := func(events ...order.Event) error {
		return uow.InTx(t.Context(), func(ctx context.Context, tx ports.Tx) error {
			return tx.AppendEvents(ctx, events)
		})
	}
	load := func(orderID string) ([]order.Event, error) {
		var evs []order.Event
		err := uow.InTx(t.Context(), func(ctx context.Context, tx ports.Tx) error {
			var err error
			evs, err = tx.LoadOrderEvents(ctx, orderID)
			return err
		})
		return evs, err
	}
	created := o.Changes()
	noErr(t, "append ORDER_CREATED", appendEvents(created...))
	stream, err := load(id)
	noErr(t, "load", err)
	if len(stream) != 1 || stream[0].Version != 1 || stream[0].Type != order.EventCreated {
		t.Fatalf("stream after the first append = %+v, want one ORDER_CREATED v1", stream)
	}
	c, ok := stream[0].Payload.(order.Created)
	want := created[0].Payload.(order.Created)
	if !ok || c.OrderID != want.OrderID || c.ReservationID != want.ReservationID || c.UserID != want.UserID ||
		!c.ExpiresAt.Equal(want.ExpiresAt) || !stream[0].OccurredAt.Equal(created[0].OccurredAt) {
		t.Fatalf("loaded event %+v differs from the appended %+v", stream[0], created[0])
	}

	// Two more events in one call.
	re, err := order.Rehydrate(stream)
	noErr(t, "rehydrate", err)
	noErr(t, "pay", re.Pay("pay-"+uniq(), baseTime.Add(time.Minute)))
	paid := re.Changes()
	noErr(t, "append v2 and v3", appendEvents(paid...))
	stream, err = load(id)
	noErr(t, "load", err)
	if got := versions(stream); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("stream versions = %v, want [1 2 3]", got)
	}

	last := paid[len(paid)-1]
	wantErr(t, "appending an existing version", appendEvents(last), ports.ErrConcurrencyConflict)
	gap := last
	gap.Version = 5
	wantErr(t, "appending version 5 after 3", appendEvents(gap), ports.ErrConcurrencyConflict)

	// All or nothing: a new stream with a conflicting one writes nothing.
	fresh := newOrder(t, randomID(), randomID(), 2)
	wantErr(t, "appending a new stream together with a conflicting one",
		appendEvents(append(fresh.Changes(), last)...), ports.ErrConcurrencyConflict)
	_, err = load(fresh.Snapshot().OrderID)
	wantErr(t, "loading the stream of a failed append", err, ports.ErrNotFound)
	_, err = load("ord_" + uniq())
	wantErr(t, "loading an unknown stream", err, ports.ErrNotFound)
}

func versions(evs []order.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.Version
	}
	return out
}

// testEventsConcurrent: concurrent appends of the same next version; one
// wins, the others see ErrConcurrencyConflict.
func testEventsConcurrent(t *testing.T, factory UnitOfWorkFactory) {
	uow, _ := factory(t)
	o := newOrder(t, randomID(), randomID(), 1)
	noErr(t, "append v1", uow.InTx(t.Context(), func(ctx context.Context, tx ports.Tx) error {
		return tx.AppendEvents(ctx, o.Changes())
	}))
	const n = 4
	errs := make([]error, n)
	parallel(n, func(i int) {
		re, err := order.Rehydrate(o.Changes())
		if err != nil {
			errs[i] = err
			return
		}
		if err := re.Cancel(order.ReasonBuyerCanceled, baseTime.Add(time.Duration(i+1)*time.Second)); err != nil {
			errs[i] = err
			return
		}
		errs[i] = uow.InTx(t.Context(), func(ctx context.Context, tx ports.Tx) error {
			return tx.AppendEvents(ctx, re.Changes())
		})
	})
	wins := 0
	for _, err := range errs {
		switch {
		case err == nil:
			wins++
		case errors.Is(err, ports.ErrConcurrencyConflict):
		default:
			t.Fatalf("concurrent append: %v, want nil or ErrConcurrencyConflict", err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d concurrent appends of version 2: %d succeeded, want 1", n, wins)
	}
	var stream []order.Event
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		var err error
		stream, err = tx.LoadOrderEvents(ctx, o.Snapshot().OrderID)
		return err
	})
	if got := versions(stream); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("stream versions after concurrent appends = %v, want [1 2]", got)
	}
}
