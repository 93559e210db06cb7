package contracttest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

func testRejections(t *testing.T, factory UnitOfWorkFactory) {
	uow, queries := factory(t)
	id := uniq()
	r := ports.Rejection{
		OrderID: "ord_" + id, ReservationID: "rsv_" + id, MessageID: "evt_" + id,
		ActivityID: randomID(), SKUID: randomID(), UserID: 3,
		Reason: "RESERVATION_EXPIRED", RejectedAt: baseTime,
	}
	later := r
	later.Reason, later.RejectedAt = "NO_FINAL_STOCK", baseTime.Add(time.Second)
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		return tx.RecordRejections(ctx, []ports.Rejection{r, later})
	})
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		return tx.RecordRejections(ctx, []ports.Rejection{later})
	})
	v, err := queries.GetOrderView(t.Context(), r.OrderID)
	noErr(t, "GetOrderView of a rejected order", err)
	if v.Status != ports.OrderRejected || v.Reason != r.Reason || v.OrderID != r.OrderID ||
		v.ReservationID != r.ReservationID || v.ActivityID != r.ActivityID || v.SKUID != r.SKUID || v.UserID != r.UserID {
		t.Fatalf("view of a rejection = %+v, want REJECTED with the first rejection %+v", v, r)
	}
}

func testQuarantine(t *testing.T, factory UnitOfWorkFactory) {
	uow, _ := factory(t)
	q := ports.QuarantinedMessage{
		ConsumerGroup: "CG_" + uniq(), Topic: "ORDER_CREATE", BrokerMessageID: "brk-" + uniq(),
		ErrorClass: "INVALID_JSON", Reason: "not a JSON object", Body: []byte("{"),
		Properties: map[string]string{"message_id": ""}, DeliveryAttempt: 1,
	}
	again := q
	again.DeliveryAttempt = 2
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		if err := tx.Quarantine(ctx, q); err != nil {
			return err
		}
		return tx.Quarantine(ctx, again)
	})
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error { return tx.Quarantine(ctx, again) })
	decodable := q
	decodable.BrokerMessageID, decodable.MessageID, decodable.ErrorClass = "brk-"+uniq(), "evt_"+uniq(), "INVALID_EVENT"
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error { return tx.Quarantine(ctx, decodable) })
}

// outcomes type-asserts tx to ports.ReservationOutcomeStore.
func outcomes(tx ports.Tx) (ports.ReservationOutcomeStore, error) {
	s, ok := tx.(ports.ReservationOutcomeStore)
	if !ok {
		return nil, fmt.Errorf("the Tx (%T) does not implement ports.ReservationOutcomeStore "+
			"(ClaimReservations, FinishReservations); it is required by the order-create consumer", tx)
	}
	return s, nil
}

func testOutcomes(t *testing.T, factory UnitOfWorkFactory) {
	uow, _ := factory(t)
	claim := func(id string) ports.ReservationClaim {
		return ports.ReservationClaim{ReservationID: id, OrderID: "ord_" + id, MessageID: "evt_" + id}
	}
	r1, r2, r3 := "rsv_1"+uniq(), "rsv_2"+uniq(), "rsv_3"+uniq()
	var first, second []string
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		s, err := outcomes(tx)
		if err != nil {
			return err
		}
		if first, err = s.ClaimReservations(ctx, []ports.ReservationClaim{claim(r2), claim(r1), claim(r2)}); err != nil {
			return err
		}
		again, err := s.ClaimReservations(ctx, []ports.ReservationClaim{claim(r1)})
		if err != nil {
			return err
		}
		if len(again) != 0 {
			return fmt.Errorf("claiming %s again in the same transaction returned %v, want nothing", r1, again)
		}
		return s.FinishReservations(ctx, []ports.ReservationOutcome{
			{ReservationID: r1, Outcome: ports.OutcomeOrdered},
			{ReservationID: r2, Outcome: ports.OutcomeRejected, Reason: "RESERVATION_EXPIRED"},
		})
	})
	if !slices.Equal(first, []string{r2, r1}) {
		t.Fatalf("ClaimReservations = %v, want [%s %s] (input order, repeated id once)", first, r2, r1)
	}
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		s, err := outcomes(tx)
		if err != nil {
			return err
		}
		// A reservation decided as ORDERED is not claimable with another
		// message id either.
		other := claim(r1)
		other.MessageID = "evt_" + uniq()
		second, err = s.ClaimReservations(ctx, []ports.ReservationClaim{other, claim(r3), claim(r2)})
		if err != nil {
			return err
		}
		return s.FinishReservations(ctx, []ports.ReservationOutcome{{ReservationID: r3, Outcome: ports.OutcomeOrdered}})
	})
	if !slices.Equal(second, []string{r3}) {
		t.Fatalf("ClaimReservations after commit = %v, want only the new %s", second, r3)
	}

	// Concurrent claims of one reservation: one winner.
	r9 := "rsv_9" + uniq()
	const n = 4
	claimed := make([]int, n)
	errs := make([]error, n)
	parallel(n, func(i int) {
		errs[i] = uow.InTx(t.Context(), func(ctx context.Context, tx ports.Tx) error {
			s, err := outcomes(tx)
			if err != nil {
				return err
			}
			c := claim(r9)
			c.MessageID = fmt.Sprintf("evt_%d_%s", i, r9)
			ids, err := s.ClaimReservations(ctx, []ports.ReservationClaim{c})
			if err != nil {
				return err
			}
			claimed[i] = len(ids)
			return s.FinishReservations(ctx, []ports.ReservationOutcome{{ReservationID: r9, Outcome: ports.OutcomeOrdered}})
		})
	})
	total := 0
	for i := range n {
		noErr(t, "concurrent ClaimReservations", errs[i])
		total += claimed[i]
	}
	if total != 1 {
		t.Fatalf("%d concurrent transactions claimed one reservation %d times in total, want 1", n, total)
	}
}

// testRollback writes to every store in a transaction whose callback fails
// (or panics) and checks that nothing persisted. InTx may re-panic or
// return an error for a panicking callback; both are accepted.
func testRollback(t *testing.T, factory UnitOfWorkFactory, panics bool) {
	uow, queries := factory(t)
	existing := testActivity(5)
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		_, _, err := tx.CreateActivity(ctx, existing)
		return err
	})
	fresh := testActivity(5)
	g := "CG_" + uniq()
	o := newOrder(t, existing.ActivityID, existing.SKUID, 4)
	snap := o.Snapshot()
	rej := ports.Rejection{
		OrderID: "ord_" + uniq(), ReservationID: "rsv_" + uniq(), MessageID: "evt_" + uniq(),
		ActivityID: existing.ActivityID, SKUID: existing.SKUID, UserID: 5, Reason: "NO_FINAL_STOCK", RejectedAt: baseTime,
	}
	entry := ports.LedgerEntry{
		ActivityID: existing.ActivityID, SKUID: existing.SKUID, Delta: -1, Reason: ports.LedgerOrderCreated,
		OrderID: snap.OrderID, ReservationID: snap.ReservationID, MessageID: "evt_" + uniq(),
	}
	msg := ports.OutboundMessage{Topic: ports.TopicOrderEvent, MessageID: "evt_" + uniq(), Tag: "ORDER_CREATED", Body: []byte("{}")}
	rc := ports.ReservationClaim{ReservationID: snap.ReservationID, OrderID: snap.OrderID, MessageID: entry.MessageID}

	write := func(ctx context.Context, tx ports.Tx) error {
		steps := []func() error{
			func() error {
				_, err := tx.ClaimInbox(ctx, g, []ports.InboxEntry{inboxEntry(entry.MessageID)})
				return err
			},
			func() error {
				s, err := outcomes(tx)
				if err != nil {
					return err
				}
				_, err = s.ClaimReservations(ctx, []ports.ReservationClaim{rc})
				return err
			},
			func() error { _, err := tx.InsertOrders(ctx, []order.Snapshot{snap}); return err },
			func() error { return tx.AppendEvents(ctx, o.Changes()) },
			func() error { _, err := tx.TakeStock(ctx, existing.ActivityID, existing.SKUID, 2); return err },
			func() error { return tx.AppendLedger(ctx, []ports.LedgerEntry{entry}) },
			func() error { return tx.AppendOutbox(ctx, []ports.OutboundMessage{msg}) },
			func() error { return tx.RecordRejections(ctx, []ports.Rejection{rej}) },
			func() error {
				return tx.Quarantine(ctx, ports.QuarantinedMessage{ConsumerGroup: g, Topic: "ORDER_CREATE",
					BrokerMessageID: "brk-" + uniq(), ErrorClass: "INVALID_JSON", Reason: "x", Body: []byte("{")})
			},
			func() error { _, _, err := tx.CreateActivity(ctx, fresh); return err },
		}
		for i, step := range steps {
			if err := step(); err != nil {
				return fmt.Errorf("write step %d: %w", i, err)
			}
		}
		if panics {
			panic(errRollback)
		}
		return errRollback
	}
	var (
		err       error
		recovered any
	)
	func() {
		defer func() { recovered = recover() }()
		err = uow.InTx(t.Context(), write)
	}()
	switch {
	case panics && recovered == nil && err == nil:
		t.Fatal("InTx with a panicking callback neither panicked nor failed")
	case !panics && !errors.Is(err, errRollback):
		t.Fatalf("InTx returned %v, want the callback's error", err)
	}

	var (
		claimedInbox, claimedRsv []string
		byRsv                    map[string]string
		errEvents, errActivity   error
		granted                  int64
		outbox                   []ports.OutboxRecord
	)
	txDo(t, uow, func(ctx context.Context, tx ports.Tx) error {
		var err error
		if claimedInbox, err = tx.ClaimInbox(ctx, g, []ports.InboxEntry{inboxEntry(entry.MessageID)}); err != nil {
			return err
		}
		s, err := outcomes(tx)
		if err != nil {
			return err
		}
		if claimedRsv, err = s.ClaimReservations(ctx, []ports.ReservationClaim{rc}); err != nil {
			return err
		}
		if byRsv, err = tx.OrdersByReservation(ctx, []string{snap.ReservationID}); err != nil {
			return err
		}
		_, errEvents = tx.LoadOrderEvents(ctx, snap.OrderID)
		if granted, err = tx.TakeStock(ctx, existing.ActivityID, existing.SKUID, 100); err != nil {
			return err
		}
		if err := tx.AppendLedger(ctx, []ports.LedgerEntry{entry}); err != nil {
			return fmt.Errorf("ledger entry of the rolled back transaction: %w", err)
		}
		if outbox, err = tx.ClaimOutbox(ctx, 10); err != nil {
			return err
		}
		_, errActivity = tx.GetActivity(ctx, fresh.ActivityID, fresh.SKUID)
		return nil
	})
	switch {
	case len(claimedInbox) != 1:
		t.Fatal("inbox row of the rolled back transaction persisted")
	case len(claimedRsv) != 1:
		t.Fatal("reservation claim of the rolled back transaction persisted")
	case len(byRsv) != 0:
		t.Fatalf("order of the rolled back transaction persisted: %v", byRsv)
	case granted != existing.Stock:
		t.Fatalf("final stock after rollback = %d, want %d", granted, existing.Stock)
	case len(outbox) != 0:
		t.Fatalf("outbox rows of the rolled back transaction persisted: %+v", outbox)
	}
	wantErr(t, "events of the rolled back transaction", errEvents, ports.ErrNotFound)
	wantErr(t, "activity of the rolled back transaction", errActivity, ports.ErrNotFound)
	_, err = queries.GetOrderView(t.Context(), rej.OrderID)
	wantErr(t, "rejection of the rolled back transaction", err, ports.ErrNotFound)
	_, err = queries.GetOrderView(t.Context(), snap.OrderID)
	wantErr(t, "order view of the rolled back transaction", err, ports.ErrNotFound)
}
