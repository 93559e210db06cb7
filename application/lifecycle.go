package application

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/seckill-dev/seckill/domain/message"
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
	fx, err := l.effects(s, changes, now, ports.TraceFrom(ctx))
	if err != nil {
		return err
	}
	if fx.returned {
		if err := tx.ReturnStock(ctx, s.ActivityID, s.SKUID, 1); err != nil {
			return fmt.Errorf("return stock: %w", err)
		}
		if err := tx.AppendLedger(ctx, fx.ledger); err != nil {
			return fmt.Errorf("append ledger: %w", err)
		}
	}
	if err := tx.AppendOutbox(ctx, fx.outbox); err != nil {
		return fmt.Errorf("append outbox: %w", err)
	}
	return nil
}

// changeEffects are the rows a decided change writes besides its events
// and its projection row.
type changeEffects struct {
	// outbox: the domain events, the state change and, for a cancel, the
	// compensation task that releases the Redis reservation.
	outbox []ports.OutboundMessage
	// ledger: the ORDER_CANCELED movement of a cancel.
	ledger []ports.LedgerEntry
	// returned: a cancel gives one unit back to the final stock.
	returned bool
}

// effects builds the outbox rows and, for a cancel, the ledger entry of a
// change that left the order in state s.
func (l *OrderLifecycle) effects(s order.Snapshot, changes []order.Event, now time.Time, trace message.TraceContext) (changeEffects, error) {
	msgs, err := orderMessages(s, changes, now, trace)
	if err != nil {
		return changeEffects{}, err
	}
	fx := changeEffects{outbox: msgs}
	if s.Status != order.StatusCanceled {
		return fx, nil
	}
	fx.returned = true
	fx.ledger = []ports.LedgerEntry{{ActivityID: s.ActivityID, SKUID: s.SKUID, Delta: +1,
		Reason: ports.LedgerOrderCanceled, OrderID: s.OrderID, ReservationID: s.ReservationID,
		MessageID: derivedID(s.OrderID, "event", s.Version)}}
	release, err := releaseMessage(releaseRef{ReservationID: s.ReservationID, OrderID: s.OrderID,
		ActivityID: s.ActivityID, SKUID: s.SKUID, UserID: s.UserID},
		reservation.ReasonOrderCanceled, ClassOrderCanceled, l.policy, now, trace)
	if err != nil {
		return changeEffects{}, err
	}
	fx.outbox = append(fx.outbox, release)
	return fx, nil
}

// expiryCheck is one payment-timeout message of a received batch.
type expiryCheck struct {
	orderID string
	inbox   ports.InboxEntry
	trace   message.TraceContext
}

// expiryOutcome is what a batch decided for one expiryCheck.
type expiryOutcome int

// The outcomes of a payment-timeout check.
const (
	// expiryCanceled: this check canceled the order.
	expiryCanceled expiryOutcome = iota + 1
	// expiryNoopCanceled: the order was canceled already (by its buyer,
	// an earlier check or another message of the batch).
	expiryNoopCanceled
	// expiryNoopPaid: the order is paid and stays paid.
	expiryNoopPaid
	// expiryDuplicate: the group handled this message id before.
	expiryDuplicate
	// expiryEarly: the deadline is not reached on the database clock;
	// nothing was written for this check.
	expiryEarly
)

// expiryResult is the decision of one expiryCheck.
type expiryResult struct {
	outcome expiryOutcome
	// snap is the order after the batch (zero for a duplicate).
	snap order.Snapshot
	// untilDeadline is expires_at - now on the database clock (early
	// checks only).
	untilDeadline time.Duration
}

// errEarlyInBatch rolls back a batch attempt that found checks before
// their deadline, so that their inbox rows are not committed.
var errEarlyInBatch = errors.New("payment-timeout check before the deadline")

// cancelExpired decides a batch of payment-timeout checks in ONE
// transaction, with the per-order semantics of a check handled alone: it
// claims the inbox rows (a message id the group handled before is a
// duplicate, one repeated in the batch counts once), reads the database's
// now, loads each order's stream and decides through the aggregate
// (Cancel with PAYMENT_TIMEOUT: a paid order is left alone, a canceled one
// is a no-op, several checks of one order see each other's effect), then
// appends all events expecting the loaded versions, updates the
// projection rows and, for every canceled order, returns its unit to the
// final stock, writes the ledger and queues the ORDER_CANCELED event, the
// state change and the compensation task; finally it finishes the inbox
// rows (SUCCEEDED for a cancel, NOOP otherwise) and commits.
//
// Checks that arrive before their deadline get expiryEarly and write
// nothing: the attempt that found them is rolled back and the others are
// decided again without them. Any other failure (a stream moved by a
// concurrent PayOrder or CancelOrder: ports.ErrConcurrencyConflict; an
// unknown order: ports.ErrNotFound; a database failure) rolls the whole
// batch back and is returned, after which no result is valid and the
// caller handles the checks one by one.
func (l *OrderLifecycle) cancelExpired(ctx context.Context, group string, checks []expiryCheck) ([]expiryResult, error) {
	results := make([]expiryResult, len(checks))
	active := make([]int, len(checks))
	for i := range active {
		active[i] = i
	}
	for len(active) > 0 {
		var early []int
		err := l.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
			var err error
			early, err = l.cancelExpiredTx(ctx, tx, group, checks, active, results)
			if err == nil && len(early) > 0 {
				return errEarlyInBatch
			}
			return err
		})
		if !errors.Is(err, errEarlyInBatch) {
			return results, err
		}
		active = slices.DeleteFunc(active, func(i int) bool { return slices.Contains(early, i) })
	}
	return results, nil
}

// cancelExpiredTx is one attempt of cancelExpired on the checks named by
// active; it fills in their results and returns those that are early
// (then nothing may be committed).
func (l *OrderLifecycle) cancelExpiredTx(ctx context.Context, tx ports.Tx, group string, checks []expiryCheck, active []int, results []expiryResult) ([]int, error) {
	entries := make([]ports.InboxEntry, len(active))
	for k, i := range active {
		entries[k] = checks[i].inbox
	}
	fresh, err := tx.ClaimInbox(ctx, group, entries)
	if err != nil {
		return nil, fmt.Errorf("claim inbox: %w", err)
	}
	isNew := set(fresh)
	now, err := tx.Now(ctx)
	if err != nil {
		return nil, fmt.Errorf("database clock: %w", err)
	}
	type loaded struct {
		o     *order.Order
		trace message.TraceContext // of the check that changed it
	}
	orders := map[string]*loaded{}
	var early []int
	var inbox []ports.InboxResult
	for _, i := range active {
		c := checks[i]
		if !isNew[c.inbox.MessageID] {
			results[i] = expiryResult{outcome: expiryDuplicate}
			continue
		}
		isNew[c.inbox.MessageID] = false // a message repeated in the batch counts once
		lo, ok := orders[c.orderID]
		if !ok {
			events, err := tx.LoadOrderEvents(ctx, c.orderID)
			if err != nil {
				return nil, fmt.Errorf("load order %s: %w", c.orderID, err)
			}
			o, err := order.Rehydrate(events)
			if err != nil {
				return nil, fmt.Errorf("order %s: %w", c.orderID, err)
			}
			lo = &loaded{o: o}
			orders[c.orderID] = lo
		}
		before := lo.o.Snapshot().Version
		err := lo.o.Cancel(order.ReasonPaymentTimeout, now)
		snap := lo.o.Snapshot()
		switch {
		case err == nil && snap.Version > before:
			results[i] = expiryResult{outcome: expiryCanceled, snap: snap}
			lo.trace = c.trace
			inbox = append(inbox, ports.InboxResult{MessageID: c.inbox.MessageID, Status: ports.InboxSucceeded})
		case err == nil:
			results[i] = expiryResult{outcome: expiryNoopCanceled, snap: snap}
			inbox = append(inbox, ports.InboxResult{MessageID: c.inbox.MessageID, Status: ports.InboxNoop, Detail: "canceled"})
		case errors.Is(err, order.ErrAlreadyPaid):
			results[i] = expiryResult{outcome: expiryNoopPaid, snap: snap}
			inbox = append(inbox, ports.InboxResult{MessageID: c.inbox.MessageID, Status: ports.InboxNoop, Detail: "paid"})
		case errors.Is(err, order.ErrNotExpired):
			results[i] = expiryResult{outcome: expiryEarly, snap: snap, untilDeadline: snap.ExpiresAt.Sub(now)}
			early = append(early, i)
		default:
			return nil, fmt.Errorf("cancel order %s: %w", c.orderID, err)
		}
	}
	if len(early) > 0 {
		return early, nil
	}
	// Rows are written in order id order, so that batches touching the
	// same orders wait for each other instead of deadlocking.
	var (
		events  []tracedEvents
		snaps   []order.Snapshot
		ledger  []ports.LedgerEntry
		outbox  []ports.OutboundMessage
		returns = map[[2]int64]int64{}
	)
	for _, id := range slices.Sorted(maps.Keys(orders)) {
		lo := orders[id]
		changes := lo.o.Changes()
		if len(changes) == 0 {
			continue
		}
		s := lo.o.Snapshot()
		fx, err := l.effects(s, changes, now, lo.trace)
		if err != nil {
			return nil, err
		}
		events = append(events, tracedEvents{trace: lo.trace, events: changes})
		snaps = append(snaps, s)
		ledger = append(ledger, fx.ledger...)
		outbox = append(outbox, fx.outbox...)
		if fx.returned {
			returns[[2]int64{s.ActivityID, s.SKUID}]++
		}
	}
	if len(events) > 0 {
		// Each order's ORDER_CANCELED records the trace of the check
		// that canceled it, in one AppendEvents call for the batch.
		if err := appendTraced(ctx, tx, events); err != nil {
			return nil, fmt.Errorf("append events: %w", err)
		}
		if err := tx.UpdateOrders(ctx, snaps); err != nil {
			return nil, fmt.Errorf("update orders: %w", err)
		}
	}
	// Final stock rows in ascending (activity, sku) order, as order
	// creation takes them.
	skus := slices.SortedFunc(maps.Keys(returns), func(a, b [2]int64) int {
		return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]))
	})
	for _, k := range skus {
		if err := tx.ReturnStock(ctx, k[0], k[1], returns[k]); err != nil {
			return nil, fmt.Errorf("return stock: %w", err)
		}
	}
	if len(ledger) > 0 {
		if err := tx.AppendLedger(ctx, ledger); err != nil {
			return nil, fmt.Errorf("append ledger: %w", err)
		}
	}
	if len(outbox) > 0 {
		if err := tx.AppendOutbox(ctx, outbox); err != nil {
			return nil, fmt.Errorf("append outbox: %w", err)
		}
	}
	if len(inbox) > 0 {
		if err := tx.FinishInbox(ctx, group, inbox); err != nil {
			return nil, fmt.Errorf("finish inbox: %w", err)
		}
	}
	return nil, nil
}

// view converts a snapshot to the query view.
func view(s order.Snapshot) ports.OrderView { return stateView(orderState(s)) }

// Pay records the payment paymentID of orderID, for the payment side
// (authorised by the caller; any order may be addressed). The deadline is
// checked against the database's clock. Every call that reaches a decision
// writes one INFO line: "order paid" (outcome PAID, or ALREADY_PAID for a
// repeated payment) or "payment refused" with the reason (ALREADY_CANCELED,
// ALREADY_PAID, PAYMENT_MISMATCH, PAYMENT_EXPIRED, INVALID_PAYMENT_ID,
// NOT_FOUND); other failures are logged where they are answered.
func (l *OrderLifecycle) Pay(ctx context.Context, orderID, paymentID string) (ports.OrderView, error) {
	s, changed, err := l.execute(ctx, orderID, 0, nil, func(o *order.Order, now time.Time) error {
		return o.Pay(paymentID, now)
	})
	if reason := payRefusal(err); reason != "" {
		l.logAction(ctx, "payment refused", orderID, s, slog.String("payment_id", paymentID), slog.String("reason", reason))
	}
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
	outcome := "PAID"
	if !changed {
		outcome = "ALREADY_PAID"
	}
	l.logAction(ctx, "order paid", orderID, s, slog.String("payment_id", paymentID), slog.String("outcome", outcome))
	return view(s), nil
}

// payRefusal names the reason a payment was refused ("" when err is not
// a refusal).
func payRefusal(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, order.ErrAlreadyCanceled):
		return "ALREADY_CANCELED"
	case errors.Is(err, order.ErrAlreadyPaid):
		return "ALREADY_PAID"
	case errors.Is(err, order.ErrPaymentMismatch):
		return "PAYMENT_MISMATCH"
	case errors.Is(err, order.ErrPaymentExpired):
		return "PAYMENT_EXPIRED"
	case errors.Is(err, order.ErrInvalid):
		return "INVALID_PAYMENT_ID"
	case errors.Is(err, ports.ErrNotFound):
		return "NOT_FOUND"
	}
	return ""
}

// Cancel cancels userID's unpaid order (BUYER_CANCELED). Every call that
// reaches a decision writes one INFO line: "order canceled" (outcome
// CANCELED, or ALREADY_CANCELED) or "cancel refused" with the reason
// (ALREADY_PAID, NOT_FOUND for an order that is not the caller's).
func (l *OrderLifecycle) Cancel(ctx context.Context, userID int64, orderID string) (ports.OrderView, error) {
	s, changed, err := l.execute(ctx, orderID, userID, nil, func(o *order.Order, now time.Time) error {
		return o.Cancel(order.ReasonBuyerCanceled, now)
	})
	caller := slog.Int64("caller_user_id", userID)
	switch {
	case errors.Is(err, order.ErrAlreadyPaid):
		l.logAction(ctx, "cancel refused", orderID, s, caller, slog.String("reason", "ALREADY_PAID"))
		return ports.OrderView{}, fmt.Errorf("cancel %s: %v: %w", orderID, err, ports.ErrOrderNotCancelable)
	case errors.Is(err, ports.ErrNotFound):
		l.logAction(ctx, "cancel refused", orderID, order.Snapshot{}, caller, slog.String("reason", "NOT_FOUND"))
		return ports.OrderView{}, err
	case err != nil:
		return ports.OrderView{}, err
	}
	outcome := "CANCELED"
	if !changed {
		outcome = "ALREADY_CANCELED"
	}
	l.logAction(ctx, "order canceled", orderID, s, caller, slog.String("outcome", outcome))
	return view(s), nil
}

// logAction writes the INFO line of one order command with the order's
// business ids (those of s, when it was loaded), the trace id and extra.
func (l *OrderLifecycle) logAction(ctx context.Context, msg, orderID string, s order.Snapshot, extra ...slog.Attr) {
	if !l.log.Enabled(ctx, slog.LevelInfo) {
		return
	}
	attrs := []slog.Attr{slog.String("order_id", orderID)}
	if s.OrderID != "" {
		attrs = append(attrs, slog.String("reservation_id", s.ReservationID), slog.Int64("user_id", s.UserID),
			slog.Int64("activity_id", s.ActivityID), slog.Int64("sku_id", s.SKUID), slog.String("status", string(s.Status)))
	}
	if tc := ports.TraceFrom(ctx); tc.TraceID != "" {
		attrs = append(attrs, slog.String("trace_id", tc.TraceID))
	}
	l.log.LogAttrs(ctx, slog.LevelInfo, msg, append(attrs, extra...)...)
}
