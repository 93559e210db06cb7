package application

import (
	"context"
	"errors"
	"log/slog"

	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/domain/reservation"
	"github.com/seckill-dev/seckill/ports"
)

// CompensateReservations is the compensation consumer's handler
// (CG_SECKILL_INVENTORY_COMPENSATE_V1): it gives a reservation's unit back
// in Redis. The release is guarded inside the Redis script (stock + 1 and
// the user's slot freed only while the reservation is not RELEASED), so
// duplicates and replays of the task are no-ops and each reservation is
// compensated at most once (I4).
//
// A task carries its own retry budget (max_attempts, retry_until). While
// Redis fails, the task is retried with backoff; once the budget is spent
// the task is no longer retried here and the broker's retry limit for the
// group moves it to the dead-letter queue, where it is stored, alerted on
// and can be replayed. A task for a reservation Redis does not know (lost
// data) is quarantined for an operator.
type CompensateReservations struct {
	reservations ports.Reservations
	uow          ports.UnitOfWork
	clock        ports.Clock
	metrics      ports.Metrics
	log          *slog.Logger
	group        string
}

// NewCompensateReservations wires the handler for consumer group group.
func NewCompensateReservations(reservations ports.Reservations, uow ports.UnitOfWork, clock ports.Clock,
	metrics ports.Metrics, log *slog.Logger, group string) *CompensateReservations {
	return &CompensateReservations{reservations: reservations, uow: uow, clock: clock, metrics: metrics,
		log: log.With("consumer_group", group), group: group}
}

// compensateItem is one decoded compensation task of a received batch.
type compensateItem struct {
	idx      int // position in the received batch
	delivery ports.Delivery
	msg      message.ReleaseReservation
}

// HandleBatch implements ports.BatchHandler. The valid tasks of a received
// batch are released together (ports.Reservations.ReleaseMany: one Redis
// round trip per activity SKU, each reservation still released at most
// once); the decision of each task is what handling it alone would give.
func (h *CompensateReservations) HandleBatch(ctx context.Context, ds []ports.Delivery) []ports.Decision {
	out := make([]ports.Decision, len(ds))
	items := make([]compensateItem, 0, len(ds))
	for i, d := range ds {
		m, err := message.DecodeReleaseReservation(d.Body)
		if err == nil && !reservation.ValidReleaseReason(reservation.ReleaseReason(m.Reason)) {
			err = errors.Join(message.ErrInvalid, errors.New("unknown release reason "+m.Reason))
		}
		if err != nil {
			out[i] = quarantine(ctx, h.uow, h.log, h.group, ports.TopicInventoryCompensate, d, m.MessageID, message.Class(err), err)
			continue
		}
		items = append(items, compensateItem{idx: i, delivery: d, msg: m})
	}
	if len(items) == 0 {
		return out
	}
	reqs := make([]ports.ReleaseRequest, len(items))
	for i, it := range items {
		reqs[i] = ports.ReleaseRequest{Reason: reservation.ReleaseReason(it.msg.Reason),
			Ref: ports.ReservationRef{ActivityID: it.msg.ActivityID, SKUID: it.msg.SKUID, ReservationID: it.msg.ReservationID,
				UserID: it.msg.UserID}}
	}
	results := h.reservations.ReleaseMany(ctx, reqs)
	for i, it := range items {
		res := ports.ReleaseResult{Err: errors.New("no release result")}
		if i < len(results) {
			res = results[i]
		}
		out[it.idx] = h.decide(ctx, it, res)
	}
	return out
}

// decide turns the release result of one task into its decision.
func (h *CompensateReservations) decide(ctx context.Context, it compensateItem, res ports.ReleaseResult) ports.Decision {
	m, d := it.msg, it.delivery
	log := h.log.With("message_id", m.MessageID, "reservation_id", m.ReservationID, "order_id", m.OrderID,
		"activity_id", m.ActivityID, "sku_id", m.SKUID, "user_id", m.UserID, "topic", d.Topic,
		"delivery_attempt", d.DeliveryAttempt, "reason", m.Reason, "failure_class", m.FailureClass,
		"trace_id", m.Trace.TraceID)
	switch err := res.Err; {
	case err == nil:
		h.metrics.CompensationApplied(res.Released)
		if res.Released {
			log.InfoContext(ctx, "reservation released", "decision", "released")
			return ports.Acked("released")
		}
		log.DebugContext(ctx, "reservation already released", "decision", "duplicate")
		return ports.Acked("duplicate")
	case errors.Is(err, ports.ErrNotFound):
		return quarantine(ctx, h.uow, h.log, h.group, ports.TopicInventoryCompensate, d, m.MessageID, "RESERVATION_MISSING", err)
	}
	exhausted := d.DeliveryAttempt >= m.MaxAttempts || !h.clock.Now().Before(m.RetryUntil)
	log.WarnContext(ctx, "release failed", "error_class", classify(res.Err), "error", res.Err, "budget_exhausted", exhausted)
	if exhausted {
		// Leave it to the broker: without an ACK the group's retry limit
		// moves it to the dead-letter queue; no faster retries from here.
		return ports.RetryLater("exhausted", retryMax)
	}
	return retry(d, classify(res.Err))
}
