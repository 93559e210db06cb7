package application

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

// CancelExpiredOrders is the payment-timeout consumer's handler
// (CG_SECKILL_ORDER_TIMEOUT_V1). A CANCEL_ORDER_IF_UNPAID message only
// triggers a check: the order is canceled only if it is still unpaid and
// its expires_at <= the database's now(), decided through the aggregate
// with optimistic concurrency (so it races safely with PayOrder).
//
// A received batch is decided in ONE transaction (OrderLifecycle
// cancelExpired: each order through the aggregate at its loaded version,
// all events appended with version checks, stock, ledger and outbox rows
// of every canceled order, the inbox rows finished), so a wave of orders
// expiring together costs one commit per batch instead of one per order.
// When the batch transaction fails (a concurrent PayOrder or CancelOrder
// moved one of the streams, an unknown order, a database failure), every
// message is handled alone, each in its own transaction that reloads and
// decides again on a conflict, so the per-order semantics never depend on
// the batching.
//
// A message is one order's CANCEL_ORDER_IF_UNPAID or a
// CANCEL_ORDERS_IF_UNPAID trigger standing for several (the relay merges
// the checks of one activity and due second): a trigger's checks are
// decided exactly as if each had come alone, under its own message id
// (the inbox key), and the trigger is acknowledged once every check is
// settled; a check that is early or fails makes the whole trigger come
// back, and the settled ones are then duplicates.
//
// A late or duplicated message, or one for a paid or already canceled
// order, is a logged no-op. A message that arrives early (the broker's
// timer may deliver up to a tick before the deadline) changes nothing and
// is redelivered after the deadline, so no unpaid order is left behind.
type CancelExpiredOrders struct {
	life    *OrderLifecycle
	uow     ports.UnitOfWork
	metrics ports.Metrics
	log     *slog.Logger
	group   string
}

// NewCancelExpiredOrders wires the handler for consumer group group.
func NewCancelExpiredOrders(life *OrderLifecycle, uow ports.UnitOfWork, metrics ports.Metrics, log *slog.Logger, group string) *CancelExpiredOrders {
	return &CancelExpiredOrders{life: life, uow: uow, metrics: metrics, log: log.With("consumer_group", group), group: group}
}

// timeoutItem is one check of a received batch: a message, or one of a
// trigger's checks.
type timeoutItem struct {
	idx      int // position of its delivery in the received batch
	delivery ports.Delivery
	msg      message.CancelOrderIfUnpaid
}

func (it timeoutItem) inbox() ports.InboxEntry {
	return ports.InboxEntry{MessageID: it.msg.MessageID, Topic: it.delivery.Topic, ReservationID: it.msg.ReservationID,
		OrderID: it.msg.OrderID, DeliveryAttempt: it.delivery.DeliveryAttempt}
}

// HandleBatch implements ports.BatchHandler: undecodable messages are
// quarantined, the checks of the others decided in one transaction (one
// by one when it fails, or when only one is left), and each delivery's
// decision combines those of its checks (see settle).
func (h *CancelExpiredOrders) HandleBatch(ctx context.Context, ds []ports.Delivery) []ports.Decision {
	out := make([]ports.Decision, len(ds))
	var items []timeoutItem
	for i, d := range ds {
		env, checks, err := message.DecodePaymentTimeout(d.Body)
		if err != nil {
			out[i] = quarantine(ctx, h.uow, h.log, h.group, ports.TopicOrderTimeout, d, env.MessageID, message.Class(err), err)
			continue
		}
		for _, c := range checks {
			items = append(items, timeoutItem{idx: i, delivery: d, msg: c})
		}
	}
	if len(items) == 0 {
		return out
	}
	per := make([]ports.Decision, len(items))
	if len(items) == 1 {
		per[0] = h.handle(ctx, items[0])
		return settle(out, items, per)
	}
	checks := make([]expiryCheck, len(items))
	for k, it := range items {
		checks[k] = expiryCheck{orderID: it.msg.OrderID, inbox: it.inbox(), trace: it.msg.Trace}
	}
	results, err := h.life.cancelExpired(ctx, h.group, checks)
	if err != nil {
		h.log.WarnContext(ctx, "timeout batch transaction failed, checking one by one", "batch", len(items),
			"error_class", classify(err), "error", err)
		for k, it := range items {
			per[k] = h.handle(ctx, it)
		}
		return settle(out, items, per)
	}
	for k, it := range items {
		per[k] = h.decided(ctx, it, results[k])
	}
	return settle(out, items, per)
}

// settle fills in out, for each delivery of items, the decision its
// checks' decisions (per, in items order) make together: acknowledged
// when every check is (the outcome of a cancel when one canceled, else
// of its first check), otherwise the non-acknowledging decision that asks
// for the latest redelivery.
func settle(out []ports.Decision, items []timeoutItem, per []ports.Decision) []ports.Decision {
	seen := make(map[int]bool, len(out))
	for k, it := range items {
		d, first := per[k], !seen[it.idx]
		seen[it.idx] = true
		cur := out[it.idx]
		switch {
		case first:
			out[it.idx] = d
		case !d.Ack && (cur.Ack || d.RetryAfter > cur.RetryAfter):
			out[it.idx] = d
		case d.Ack && cur.Ack && d.Outcome == "canceled":
			out[it.idx] = d
		}
	}
	return out
}

// decided turns the batch's result for one message into its decision.
func (h *CancelExpiredOrders) decided(ctx context.Context, it timeoutItem, r expiryResult) ports.Decision {
	var outcome string
	var decision ports.Decision
	switch r.outcome {
	case expiryCanceled:
		outcome, decision = "CANCELED", ports.Acked("canceled")
	case expiryNoopCanceled:
		outcome, decision = "NOOP_CANCELED", ports.Acked("noop")
	case expiryNoopPaid:
		outcome, decision = "NOOP_PAID", ports.Acked("noop")
	case expiryDuplicate:
		outcome, decision = "DUPLICATE", ports.Acked("duplicate")
	case expiryEarly:
		wait := max(r.untilDeadline, 0) + time.Second // measured on the database clock
		outcome, decision = "NOOP_NOT_EXPIRED", ports.RetryLater("early", wait)
	default:
		return h.handle(ctx, it) // not decided by the batch: never expected
	}
	h.checked(ctx, it, outcome, r.snap)
	return decision
}

// checked records the outcome of one check in metrics and the log.
func (h *CancelExpiredOrders) checked(ctx context.Context, it timeoutItem, outcome string, s order.Snapshot) {
	h.metrics.CancelOutcome(outcome)
	level := slog.LevelDebug // one check per order: the no-ops are DEBUG
	if outcome == "CANCELED" {
		level = slog.LevelInfo
	}
	h.logger(it).Log(ports.WithTrace(ctx, it.msg.Trace), level, "payment timeout checked",
		"decision", outcome, "status", s.Status, "aggregate_version", s.Version)
}

func (h *CancelExpiredOrders) logger(it timeoutItem) *slog.Logger {
	m, d := it.msg, it.delivery
	return h.log.With("message_id", m.MessageID, "order_id", m.OrderID, "reservation_id", m.ReservationID,
		"topic", d.Topic, "delivery_attempt", d.DeliveryAttempt, "trace_id", m.Trace.TraceID)
}

// handle checks one message in its own transaction (OrderLifecycle
// execute: a lost race reloads and decides again).
func (h *CancelExpiredOrders) handle(ctx context.Context, it timeoutItem) ports.Decision {
	m, d := it.msg, it.delivery
	ctx = ports.WithTrace(ctx, m.Trace)
	var untilDeadline time.Duration
	inbox := &inboxClaim{group: h.group, entry: it.inbox()}
	s, changed, err := h.life.execute(ctx, m.OrderID, 0, inbox, func(o *order.Order, now time.Time) error {
		untilDeadline = o.Snapshot().ExpiresAt.Sub(now)
		return o.Cancel(order.ReasonPaymentTimeout, now)
	})
	outcome := "CANCELED"
	var decision ports.Decision
	switch {
	case err == nil && changed:
		decision = ports.Acked("canceled")
	case err == nil:
		outcome, decision = "NOOP_CANCELED", ports.Acked("noop")
	case errors.Is(err, errDuplicate):
		outcome, decision = "DUPLICATE", ports.Acked("duplicate")
	case errors.Is(err, order.ErrAlreadyPaid):
		outcome, decision = "NOOP_PAID", ports.Acked("noop")
	case errors.Is(err, order.ErrNotExpired):
		wait := max(untilDeadline, 0) + time.Second // measured on the database clock
		outcome, decision = "NOOP_NOT_EXPIRED", ports.RetryLater("early", wait)
	case errors.Is(err, ports.ErrNotFound):
		// The delay message is written in the order's creation
		// transaction, so a missing order is a foreign or corrupt message.
		return quarantine(ctx, h.uow, h.log, h.group, ports.TopicOrderTimeout, d, m.MessageID, "ORDER_NOT_FOUND", err)
	default:
		h.logger(it).WarnContext(ctx, "timeout check failed", "error_class", classify(err), "error", err)
		return retry(d, classify(err))
	}
	h.checked(ctx, it, outcome, s)
	return decision
}
