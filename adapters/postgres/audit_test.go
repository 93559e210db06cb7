package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/seckill-dev/seckill/adapters/postgres"
	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

// AuditStock and ReservationStates over a few thousand held reservations
// of every kind, with repeats, in one statement each: ordered (open, paid),
// canceled, rejected (with a rejection, or with a REJECTED outcome only)
// and unknown.
func TestAuditStockClassifiesManyHeldReservations(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	now := time.Now().UTC().Truncate(time.Microsecond)
	const activity, sku, n = 7, 3, 400
	act := ports.Activity{ActivityID: activity, SKUID: sku, Stock: 5000, StartsAt: now.Add(-time.Hour), EndsAt: now.Add(time.Hour),
		PaymentTimeout: 15 * time.Minute, ReservationTTL: 5 * time.Minute}
	var (
		snaps                           []order.Snapshot
		rejections                      []ports.Rejection
		claims                          []ports.ReservationClaim
		outcomes                        []ports.ReservationOutcome
		held, wantOrdered, wantReleased []string
		wantStates                      []ports.ReservationState
		wantNonCanceled                 int64
	)
	for i := range n {
		o := newOrder(t, activity, sku, int64(i+1), now)
		rsv := o.Snapshot().ReservationID
		state := ports.ReservationState{ReservationID: rsv, Outcome: ports.OutcomeOrdered, OrderStatus: order.StatusCreated}
		switch i % 4 {
		case 0:
			wantOrdered = append(wantOrdered, rsv)
			wantNonCanceled++
		case 1:
			if err := o.Pay("pay-"+rsv, now); err != nil {
				t.Fatal(err)
			}
			wantOrdered = append(wantOrdered, rsv)
			wantNonCanceled++
			state.OrderStatus = order.StatusPaid
		case 2:
			if err := o.Cancel(order.ReasonBuyerCanceled, now); err != nil {
				t.Fatal(err)
			}
			wantReleased = append(wantReleased, rsv)
			state.OrderStatus = order.StatusCanceled
		case 3: // no order: rejected, or decided REJECTED, or unknown
			rsv = newID("rsv")
			state = ports.ReservationState{ReservationID: rsv}
			switch i % 3 {
			case 0:
				rejections = append(rejections, ports.Rejection{OrderID: newID("ord"), ReservationID: rsv, MessageID: newID("evt"),
					ActivityID: activity, SKUID: sku, UserID: int64(i + 1), Reason: "NO_FINAL_STOCK", RejectedAt: now})
				wantReleased = append(wantReleased, rsv)
				state.Outcome, state.Reason = ports.OutcomeRejected, "NO_FINAL_STOCK"
			case 1:
				claims = append(claims, ports.ReservationClaim{ReservationID: rsv, OrderID: newID("ord"), MessageID: newID("evt")})
				outcomes = append(outcomes, ports.ReservationOutcome{ReservationID: rsv, Outcome: ports.OutcomeRejected, Reason: "RECONCILED_EXPIRED"})
				wantReleased = append(wantReleased, rsv)
				state.Outcome, state.Reason = ports.OutcomeRejected, "RECONCILED_EXPIRED"
			}
		}
		if i%4 != 3 {
			snaps = append(snaps, o.Snapshot())
		}
		held = append(held, rsv)
		wantStates = append(wantStates, state)
	}
	held = append(held, held[:50]...) // repeats count once
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		if _, _, err := tx.CreateActivity(ctx, act); err != nil {
			return err
		}
		if _, err := tx.TakeStock(ctx, activity, sku, 123); err != nil {
			return err
		}
		if _, err := tx.InsertOrders(ctx, snaps); err != nil {
			return err
		}
		if err := tx.RecordRejections(ctx, rejections); err != nil {
			return err
		}
		if _, err := tx.ClaimReservations(ctx, claims); err != nil {
			return err
		}
		return tx.FinishReservations(ctx, outcomes)
	})

	var (
		audit  ports.StockAudit
		states []ports.ReservationState
	)
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
		var err error
		if audit, err = tx.AuditStock(ctx, activity, sku, held); err != nil {
			return err
		}
		states, err = tx.ReservationStates(ctx, held[:n])
		return err
	})
	if audit.InitialStock != 5000 || audit.PGFinalStock != 5000-123 || audit.NonCanceledOrders != wantNonCanceled {
		t.Fatalf("audit initial %d final %d non-canceled %d; want 5000, %d, %d",
			audit.InitialStock, audit.PGFinalStock, audit.NonCanceledOrders, 5000-123, wantNonCanceled)
	}
	if !slices.Equal(audit.OrderedHeld, wantOrdered) {
		t.Fatalf("OrderedHeld: %d ids, want %d in input order", len(audit.OrderedHeld), len(wantOrdered))
	}
	if !slices.Equal(audit.ReleasedHeld, wantReleased) {
		t.Fatalf("ReleasedHeld: %d ids, want %d in input order", len(audit.ReleasedHeld), len(wantReleased))
	}
	if !slices.Equal(states, wantStates) {
		for i := range min(len(states), len(wantStates)) {
			if states[i] != wantStates[i] {
				t.Fatalf("state %d = %+v, want %+v", i, states[i], wantStates[i])
			}
		}
		t.Fatalf("%d states, want %d", len(states), len(wantStates))
	}
}

// OrderStreams pages through streams of different lengths with page
// boundaries inside runs of events: every stream complete, each once, in
// order id order.
func TestOrderStreamsPagesReturnWholeStreams(t *testing.T) {
	t.Parallel()
	e := newEnv(t, postgres.Config{})
	now := time.Now().UTC().Truncate(time.Microsecond)
	const n = 40
	want := make(map[string]int, n)
	var all []order.Event
	for i := range n {
		o := newOrder(t, 1, 1, int64(i+1), now)
		switch i % 3 {
		case 1:
			if err := o.Cancel(order.ReasonBuyerCanceled, now); err != nil {
				t.Fatal(err)
			}
		case 2:
			if err := o.Pay("pay-"+o.Snapshot().OrderID, now); err != nil {
				t.Fatal(err)
			}
		}
		want[o.Snapshot().OrderID] = len(o.Changes())
		all = append(all, o.Changes()...)
	}
	e.inTx(t, func(ctx context.Context, tx ports.Tx) error { return tx.AppendEvents(ctx, all) })

	var ids []string
	for after := ""; ; {
		var page [][]order.Event
		e.inTx(t, func(ctx context.Context, tx ports.Tx) error {
			var err error
			page, err = tx.OrderStreams(ctx, after, 7)
			return err
		})
		if len(page) == 0 {
			break
		}
		if len(page) > 7 {
			t.Fatalf("page of %d streams, limit 7", len(page))
		}
		for _, s := range page {
			id := s[0].OrderID
			if len(s) != want[id] {
				t.Fatalf("stream %s has %d events, want %d", id, len(s), want[id])
			}
			for j, ev := range s {
				if ev.OrderID != id || ev.Version != int64(j+1) {
					t.Fatalf("stream %s event %d is %s v%d", id, j, ev.OrderID, ev.Version)
				}
			}
			ids = append(ids, id)
		}
		after = ids[len(ids)-1]
	}
	if len(ids) != n || !slices.IsSorted(ids) || len(slices.Compact(slices.Clone(ids))) != n {
		t.Fatalf("read %d streams (sorted %v), want %d distinct in id order: %s", len(ids), slices.IsSorted(ids), n, fmt.Sprint(ids))
	}
}
