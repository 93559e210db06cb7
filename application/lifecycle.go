package application

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// maxConflictRetries bounds the reload-and-decide loop of a command that
// lost an optimistic-concurrency race.
const maxConflictRetries = 8

// Sentinels that abort a command transaction without writing anything.
var (
	// errNoChange: the command applied but changed nothing.
	errNoChange = errors.New("no change")
	// errDuplicate: the message was already handled by the group.
	errDuplicate = errors.New("duplicate message")
)

// OrderLifecycle executes commands on existing orders (pay, cancel) through
// the Order aggregate with optimistic concurrency on its event stream:
// load the stream, decide, append the new events expecting the loaded
// version. When two commands race (pay against cancel), one append wins and
// the loser reloads and decides again against the winner's state, so
// exactly one of them takes effect and a paid order is never canceled (I5).
//
// A successful cancel, in the same transaction, returns the unit to the
// final stock, writes the ledger, and queues the compensation task that
// releases the Redis reservation, the ORDER_CANCELED event and the state
// change for the projection.
type OrderLifecycle struct {
	uow    ports.UnitOfWork
	log    *slog.Logger
	policy CompensationPolicy
}

// NewOrderLifecycle wires the command side.
func NewOrderLifecycle(uow ports.UnitOfWork, log *slog.Logger, policy CompensationPolicy) *OrderLifecycle {
	return &OrderLifecycle{uow: uow, log: log, policy: policy}
}

// command decides on a rehydrated order at the database's now. It returns
// a domain error when the command does not apply.
type command func(o *order.Order, now time.Time) error

// inboxClaim optionally makes the command idempotent per message.
type inboxClaim struct {
	group string
	entry ports.InboxEntry
}

// execute runs cmd on orderID. owner > 0 restricts the order to that user
// (others get ErrNotFound). It returns the order's state after the command
// and whether the command changed it.
func (l *OrderLifecycle) execute(ctx context.Context, orderID string, owner int64, inbox *inboxClaim, cmd command) (order.Snapshot, bool, error) {
	for attempt := 0; ; attempt++ {
		var snap order.Snapshot
		changed := false
		err := l.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
			if inbox != nil {
				fresh, err := tx.ClaimInbox(ctx, inbox.group, []ports.InboxEntry{inbox.entry})
				if err != nil {
					return fmt.Errorf("claim inbox: %w", err)
				}
				if len(fresh) == 0 {
					return errDuplicate
				}
			}
			events, err := tx.LoadOrderEvents(ctx, orderID)
			if err != nil {
				return fmt.Errorf("load order %s: %w", orderID, err)
			}
			o, err := order.Rehydrate(events)
			if err != nil {
				return err
			}
			if owner > 0 && o.Snapshot().UserID != owner {
				return fmt.Errorf("order %s: %w", orderID, ports.ErrNotFound)
			}
			now, err := tx.Now(ctx)
			if err != nil {
				return err
			}
			if err := cmd(o, now); err != nil {
				snap = o.Snapshot()
				return err
			}
			snap = o.Snapshot()
			changes := o.Changes()
			if len(changes) == 0 {
				if inbox != nil {
					// Commit the inbox row: the message is handled.
					return tx.FinishInbox(ctx, inbox.group, []ports.InboxResult{{MessageID: inbox.entry.MessageID, Status: ports.InboxNoop}})
				}
				return errNoChange
			}
			if err := l.write(ctx, tx, snap, changes, now); err != nil {
				return err
			}
			changed = true
			if inbox != nil {
				return tx.FinishInbox(ctx, inbox.group, []ports.InboxResult{{MessageID: inbox.entry.MessageID, Status: ports.InboxSucceeded}})
			}
			return nil
		})
		switch {
		case errors.Is(err, errNoChange):
			return snap, false, nil
		case errors.Is(err, ports.ErrConcurrencyConflict) && attempt < maxConflictRetries:
			continue
		case err != nil:
			return snap, false, err
		}
		return snap, changed, nil
	}
}

// write persists a decided change with everything that must commit with it.
func (l *OrderLifecycle) write(ctx context.Context, tx ports.Tx, s order.Snapshot, changes []order.Event, now time.Time) error {
	if err := tx.AppendEvents(ctx, changes); err != nil {
		return fmt.Errorf("append events: %w", err)
	}
	if err := tx.UpdateOrders(ctx, []order.Snapshot{s}); err != nil {
		return fmt.Errorf("update order: %w", err)
	}
	trace := ports.TraceFrom(ctx)
	msgs, err := orderMessages(s, changes, now, trace)
	if err != nil {
		return err
	}
	if s.Status == order.StatusCanceled {
		if err := tx.ReturnStock(ctx, s.ActivityID, s.SKUID, 1); err != nil {
			return fmt.Errorf("return stock: %w", err)
		}
		if err := tx.AppendLedger(ctx, []ports.LedgerEntry{{ActivityID: s.ActivityID, SKUID: s.SKUID, Delta: +1,
			Reason: ports.LedgerOrderCanceled, OrderID: s.OrderID, ReservationID: s.ReservationID,
			MessageID: derivedID(s.OrderID, "event", s.Version)}}); err != nil {
			return fmt.Errorf("append ledger: %w", err)
		}
		release, err := releaseMessage(releaseRef{ReservationID: s.ReservationID, OrderID: s.OrderID,
			ActivityID: s.ActivityID, SKUID: s.SKUID, UserID: s.UserID},
			reservation.ReasonOrderCanceled, ClassOrderCanceled, l.policy, now, trace)
		if err != nil {
			return err
		}
		msgs = append(msgs, release)
	}
	if err := tx.AppendOutbox(ctx, msgs); err != nil {
		return fmt.Errorf("append outbox: %w", err)
	}
	return nil
}

// view converts a snapshot to the query view.
func view(s order.Snapshot) ports.OrderView { return stateView(orderState(s)) }

// Pay records the payment paymentID of orderID, for the payment side
// (authorised by the caller; any order may be addressed). The deadline is
// checked against the database's clock.
func (l *OrderLifecycle) Pay(ctx context.Context, orderID, paymentID string) (ports.OrderView, error) {
	s, _, err := l.execute(ctx, orderID, 0, nil, func(o *order.Order, now time.Time) error {
		return o.Pay(paymentID, now)
	})
	switch {
	case errors.Is(err, order.ErrAlreadyCanceled), errors.Is(err, order.ErrAlreadyPaid), errors.Is(err, order.ErrPaymentMismatch):
		return ports.OrderView{}, fmt.Errorf("pay %s: %v: %w", orderID, err, ports.ErrOrderNotPayable)
	case errors.Is(err, order.ErrPaymentExpired):
		return ports.OrderView{}, fmt.Errorf("pay %s: %w", orderID, ports.ErrPaymentExpired)
	case errors.Is(err, order.ErrInvalid):
		return ports.OrderView{}, ports.InvalidField("payment_id", "%v", err)
	case err != nil:
		return ports.OrderView{}, err
	}
	return view(s), nil
}

// Cancel cancels userID's unpaid order (BUYER_CANCELED).
func (l *OrderLifecycle) Cancel(ctx context.Context, userID int64, orderID string) (ports.OrderView, error) {
	s, _, err := l.execute(ctx, orderID, userID, nil, func(o *order.Order, now time.Time) error {
		return o.Cancel(order.ReasonBuyerCanceled, now)
	})
	switch {
	case errors.Is(err, order.ErrAlreadyPaid):
		return ports.OrderView{}, fmt.Errorf("cancel %s: %v: %w", orderID, err, ports.ErrOrderNotCancelable)
	case err != nil:
		return ports.OrderView{}, err
	}
	return view(s), nil
}
