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

// HandleBatch implements ports.BatchHandler.
func (h *CancelExpiredOrders) HandleBatch(ctx context.Context, ds []ports.Delivery) []ports.Decision {
	out := make([]ports.Decision, len(ds))
	for i, d := range ds {
		out[i] = h.handle(ctx, d)
	}
	return out
}

func (h *CancelExpiredOrders) handle(ctx context.Context, d ports.Delivery) ports.Decision {
	m, err := message.DecodeCancelOrderIfUnpaid(d.Body)
	if err != nil {
		return quarantine(ctx, h.uow, h.log, h.group, ports.TopicOrderTimeout, d, m.MessageID, message.Class(err), err)
	}
	ctx = ports.WithTrace(ctx, m.Trace)
	log := h.log.With("message_id", m.MessageID, "order_id", m.OrderID, "reservation_id", m.ReservationID,
		"topic", d.Topic, "delivery_attempt", d.DeliveryAttempt, "trace_id", m.Trace.TraceID)
	var untilDeadline time.Duration
	inbox := &inboxClaim{group: h.group, entry: ports.InboxEntry{MessageID: m.MessageID, Topic: d.Topic,
		ReservationID: m.ReservationID, OrderID: m.OrderID, DeliveryAttempt: d.DeliveryAttempt}}
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
		log.WarnContext(ctx, "timeout check failed", "error_class", classify(err), "error", err)
		return retry(d, classify(err))
	}
	h.metrics.CancelOutcome(outcome)
	log.InfoContext(ctx, "payment timeout checked", "decision", outcome, "status", s.Status, "aggregate_version", s.Version)
	return decision
}
