package application

import (
	"context"
	"fmt"
	"time"

	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// createWrites collects the rows one order-create batch transaction writes:
// order events, ledger entries, outbox messages, rejections, reservation
// outcomes and inbox results. The methods add the rows of one message each,
// in batch order; write then stores every kind of row with one call.
type createWrites struct {
	events     []tracedEvents
	ledger     []ports.LedgerEntry
	outbox     []ports.OutboundMessage
	rejections []ports.Rejection
	decided    []ports.ReservationOutcome
	results    []ports.InboxResult
}

// duplicate finishes the inbox row of a new message whose reservation was
// decided before, under another message id.
func (w *createWrites) duplicate(m message.OrderCreateRequested) {
	w.results = append(w.results, ports.InboxResult{MessageID: m.MessageID, Status: ports.InboxDuplicate,
		Detail: "reservation already decided"})
}

// created adds the rows of an order created for m: its events, the ledger
// entry taking one unit, the domain event and state change messages, the
// payment-timeout delay message, the ORDERED reservation outcome and the
// succeeded inbox row.
func (w *createWrites) created(m message.OrderCreateRequested, o *order.Order, now time.Time) error {
	changes := o.Changes()
	w.events = append(w.events, tracedEvents{trace: m.Trace, events: changes})
	w.ledger = append(w.ledger, ports.LedgerEntry{ActivityID: m.ActivityID, SKUID: m.SKUID, Delta: -1,
		Reason: ports.LedgerOrderCreated, OrderID: m.OrderID, ReservationID: m.ReservationID, MessageID: m.MessageID})
	snap := o.Snapshot()
	msgs, err := orderMessages(snap, changes, now, m.Trace)
	if err != nil {
		return err
	}
	timeout, err := timeoutMessage(snap, now, m.Trace)
	if err != nil {
		return err
	}
	w.outbox = append(append(w.outbox, msgs...), timeout)
	w.decided = append(w.decided, ports.ReservationOutcome{ReservationID: m.ReservationID, Outcome: ports.OutcomeOrdered})
	w.results = append(w.results, ports.InboxResult{MessageID: m.MessageID, Status: ports.InboxSucceeded})
	return nil
}

// rejected adds the rows of m's rejection for reason: the compensation task
// releasing the reservation, the REJECTED state change, the rejection, the
// REJECTED reservation outcome and the rejected inbox row.
func (w *createWrites) rejected(m message.OrderCreateRequested, reason reservation.ReleaseReason,
	policy CompensationPolicy, now time.Time) error {
	ref := releaseRef{ReservationID: m.ReservationID, OrderID: m.OrderID, ActivityID: m.ActivityID, SKUID: m.SKUID, UserID: m.UserID}
	release, err := releaseMessage(ref, reason, ClassBusinessReject, policy, now, m.Trace)
	if err != nil {
		return err
	}
	state, err := stateChanged(message.OrderState{
		OrderID: m.OrderID, ReservationID: m.ReservationID, ActivityID: m.ActivityID, SKUID: m.SKUID,
		UserID: m.UserID, Status: string(ports.OrderRejected), Reason: string(reason),
		AggregateVersion: 1, CreatedAt: m.ReservationCreatedAt, UpdatedAt: now,
	}, now, m.Trace)
	if err != nil {
		return err
	}
	w.outbox = append(w.outbox, release, state)
	w.rejections = append(w.rejections, ports.Rejection{OrderID: m.OrderID, ReservationID: m.ReservationID,
		MessageID: m.MessageID, ActivityID: m.ActivityID, SKUID: m.SKUID, UserID: m.UserID,
		Reason: string(reason), RejectedAt: now})
	w.decided = append(w.decided, ports.ReservationOutcome{ReservationID: m.ReservationID,
		Outcome: ports.OutcomeRejected, Reason: string(reason)})
	w.results = append(w.results, ports.InboxResult{MessageID: m.MessageID, Status: ports.InboxRejected, Detail: string(reason)})
	return nil
}

// write stores the collected rows in tx, one call per non-empty kind, in
// this order: events, ledger, outbox, rejections, reservation outcomes,
// inbox results (of consumer group group). The events are appended with
// appendTraced, still one call for the batch, so that each order's
// ORDER_CREATED records the trace of the request that placed it.
func (w *createWrites) write(ctx context.Context, tx ports.Tx, group string) error {
	if len(w.events) > 0 {
		if err := appendTraced(ctx, tx, w.events); err != nil {
			return fmt.Errorf("append events: %w", err)
		}
	}
	if len(w.ledger) > 0 {
		if err := tx.AppendLedger(ctx, w.ledger); err != nil {
			return fmt.Errorf("append ledger: %w", err)
		}
	}
	if len(w.outbox) > 0 {
		if err := tx.AppendOutbox(ctx, w.outbox); err != nil {
			return fmt.Errorf("append outbox: %w", err)
		}
	}
	if len(w.rejections) > 0 {
		if err := tx.RecordRejections(ctx, w.rejections); err != nil {
			return fmt.Errorf("record rejections: %w", err)
		}
	}
	if len(w.decided) > 0 {
		if err := tx.FinishReservations(ctx, w.decided); err != nil {
			return fmt.Errorf("finish reservations: %w", err)
		}
	}
	if len(w.results) > 0 {
		if err := tx.FinishInbox(ctx, group, w.results); err != nil {
			return fmt.Errorf("finish inbox: %w", err)
		}
	}
	return nil
}
