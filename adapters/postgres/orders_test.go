package postgres_test

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

func insertOrders(t *testing.T, e *env, snaps ...order.Snapshot) []bool {
	t.Helper()
	var got []bool
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		var err error
		got, err = tx.InsertOrders(ctx, snaps)
		return err
	})
	return got
}

// InsertOrders skips, per row, every unique conflict: same order id, same
// reservation id, and a second active order of a user for the activity
// SKU; a canceled order frees the user's slot.
func TestInsertOrdersConflicts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	now := time.Now().UTC().Truncate(time.Microsecond)
	first := newOrder(t, 1, 1, 100, now).Snapshot()

	sameOrder := newOrder(t, 1, 1, 101, now).Snapshot()
	sameOrder.OrderID = first.OrderID
	sameReservation := newOrder(t, 1, 1, 102, now).Snapshot()
	sameReservation.ReservationID = first.ReservationID
	sameUser := newOrder(t, 1, 1, 100, now).Snapshot()
	otherSKU := newOrder(t, 1, 2, 100, now).Snapshot()

	if got := insertOrders(t, e, first); !slices.Equal(got, []bool{true}) {
		t.Fatalf("first insert = %v", got)
	}
	got := insertOrders(t, e, sameOrder, sameReservation, sameUser, otherSKU)
	if want := []bool{false, false, false, true}; !slices.Equal(got, want) {
		t.Fatalf("InsertOrders = %v, want %v", got, want)
	}

	// Conflicts inside one call: the first row wins.
	a, b := newOrder(t, 3, 1, 200, now).Snapshot(), newOrder(t, 3, 1, 200, now).Snapshot()
	if got := insertOrders(t, e, a, b, a); !slices.Equal(got, []bool{true, false, false}) {
		t.Fatalf("conflicts within a batch = %v", got)
	}

	// Canceling the first order frees the user's slot.
	o, err := order.Rehydrate(loadEvents(t, e, first, now))
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Cancel(order.ReasonBuyerCanceled, now); err != nil {
		t.Fatal(err)
	}
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		return tx.UpdateOrders(ctx, []order.Snapshot{o.Snapshot()})
	})
	if got := insertOrders(t, e, sameUser); !slices.Equal(got, []bool{true}) {
		t.Fatalf("insert after cancel = %v", got)
	}
}

// loadEvents stores snap's creation event (if absent) and returns its
// stream.
func loadEvents(t *testing.T, e *env, snap order.Snapshot, now time.Time) []order.Event {
	t.Helper()
	return []order.Event{{OrderID: snap.OrderID, Version: 1, Type: order.EventCreated, SchemaVersion: 1, OccurredAt: now,
		Payload: order.Created{OrderID: snap.OrderID, ReservationID: snap.ReservationID, MessageID: "m",
			ActivityID: snap.ActivityID, SKUID: snap.SKUID, UserID: snap.UserID, Quantity: 1,
			ReservedAt: now, ExpiresAt: snap.ExpiresAt}}}
}

// Events round-trip through the store; appends follow the stream head.
func TestAppendAndLoadEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	now := time.Now().UTC().Truncate(time.Microsecond)
	o1, o2 := newOrder(t, 1, 1, 1, now), newOrder(t, 1, 1, 2, now)
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		return tx.AppendEvents(ctx, append(o1.Changes(), o2.Changes()...))
	})
	var loaded []order.Event
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		var err error
		loaded, err = tx.LoadOrderEvents(ctx, o1.Snapshot().OrderID)
		return err
	})
	if !reflect.DeepEqual(loaded, o1.Changes()) {
		t.Fatalf("loaded %+v\nwant   %+v", loaded, o1.Changes())
	}
	r, err := order.Rehydrate(loaded)
	if err != nil {
		t.Fatal(err)
	}
	later := now.Add(time.Minute)
	if err := r.Pay("pay-1", later); err != nil {
		t.Fatal(err)
	}
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error { return tx.AppendEvents(ctx, r.Changes()) })
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		evs, err := tx.LoadOrderEvents(ctx, o1.Snapshot().OrderID)
		if err != nil {
			return err
		}
		if len(evs) != 3 || evs[1].Type != order.EventPaymentStarted || evs[2].Payload != (order.Paid{PaymentID: "pay-1"}) {
			t.Errorf("stream after pay = %+v", evs)
		}
		if _, err := tx.LoadOrderEvents(ctx, "ord_missing"); !errors.Is(err, ports.ErrNotFound) {
			t.Errorf("LoadOrderEvents of unknown order: %v, want ErrNotFound", err)
		}
		return nil
	})
}

// Appending at a stale or future version is a concurrency conflict and
// writes nothing, also for the other orders of the call.
func TestAppendEventsVersionConflict(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	now := time.Now().UTC().Truncate(time.Microsecond)
	o := newOrder(t, 1, 1, 1, now)
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error { return tx.AppendEvents(ctx, o.Changes()) })
	id := o.Snapshot().OrderID
	paid := func(version int64) order.Event {
		return order.Event{OrderID: id, Version: version, Type: order.EventCanceled, SchemaVersion: 1,
			OccurredAt: now, Payload: order.Canceled{Reason: order.ReasonBuyerCanceled}}
	}
	other := newOrder(t, 1, 1, 2, now)
	for _, v := range []int64{1, 3} {
		err := e.store.InTx(testCtx(t), func(ctx context.Context, tx ports.Tx) error {
			return tx.AppendEvents(ctx, append(other.Changes(), paid(v)))
		})
		if !errors.Is(err, ports.ErrConcurrencyConflict) {
			t.Fatalf("append version %d onto version 1: %v, want ErrConcurrencyConflict", v, err)
		}
	}
	if n := e.count(t, `SELECT count(*) FROM order_events`); n != 1 {
		t.Fatalf("%d events stored, want 1", n)
	}
}

// Two transactions appending the same next version: the second waits for
// the first and fails with ErrConcurrencyConflict when it commits.
func TestAppendEventsConcurrentConflict(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	now := time.Now().UTC().Truncate(time.Microsecond)
	o := newOrder(t, 1, 1, 1, now)
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error { return tx.AppendEvents(ctx, o.Changes()) })
	id := o.Snapshot().OrderID
	ev := func(reason order.CancelReason) []order.Event {
		return []order.Event{{OrderID: id, Version: 2, Type: order.EventCanceled, SchemaVersion: 1,
			OccurredAt: now, Payload: order.Canceled{Reason: reason}}}
	}
	appended := make(chan struct{})
	release := make(chan struct{})
	var wg sync.WaitGroup
	var firstErr error
	wg.Go(func() {
		firstErr = e.store.InTx(testCtx(t), func(ctx context.Context, tx ports.Tx) error {
			err := tx.AppendEvents(ctx, ev(order.ReasonBuyerCanceled))
			close(appended)
			<-release
			return err
		})
	})
	<-appended
	wg.Go(func() {
		// Let the second append start waiting on the first's index entry.
		time.Sleep(100 * time.Millisecond)
		close(release)
	})
	err := e.store.InTx(testCtx(t), func(ctx context.Context, tx ports.Tx) error {
		return tx.AppendEvents(ctx, ev(order.ReasonPaymentTimeout))
	})
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("first append: %v", firstErr)
	}
	if !errors.Is(err, ports.ErrConcurrencyConflict) {
		t.Fatalf("second append: %v, want ErrConcurrencyConflict", err)
	}
	var reason string
	if err := e.db.QueryRow(testCtx(t), `SELECT payload->>'reason' FROM order_events WHERE aggregate_id = $1 AND aggregate_version = 2`, id).Scan(&reason); err != nil || reason != string(order.ReasonBuyerCanceled) {
		t.Fatalf("stored version 2 = %q, %v", reason, err)
	}
}

// UpdateOrders applies only newer versions; OrdersByReservation maps
// reservations to orders.
func TestUpdateOrdersAndOrdersByReservation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	now := time.Now().UTC().Truncate(time.Microsecond)
	o := newOrder(t, 1, 1, 1, now)
	snap1 := o.Snapshot()
	insertOrders(t, e, snap1)
	if err := o.Pay("pay-9", now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	paid := o.Snapshot()
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		return tx.UpdateOrders(ctx, []order.Snapshot{paid, snap1})
	})
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error { return tx.UpdateOrders(ctx, []order.Snapshot{snap1}) })
	v, err := e.store.GetOrderView(testCtx(t), snap1.OrderID)
	if err != nil {
		t.Fatal(err)
	}
	if v.Status != ports.OrderPaid || v.AggregateVersion != 3 || v.PaymentID != "pay-9" || !v.PaidAt.Equal(paid.PaidAt) {
		t.Fatalf("view after stale update = %+v", v)
	}
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		m, err := tx.OrdersByReservation(ctx, []string{snap1.ReservationID, "rsv_unknown"})
		if err != nil {
			return err
		}
		if want := map[string]string{snap1.ReservationID: snap1.OrderID}; !maps.Equal(m, want) {
			t.Errorf("OrdersByReservation = %v, want %v", m, want)
		}
		return nil
	})
}
