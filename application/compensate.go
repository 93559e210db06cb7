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

// HandleBatch implements ports.BatchHandler.
func (h *CompensateReservations) HandleBatch(ctx context.Context, ds []ports.Delivery) []ports.Decision {
	out := make([]ports.Decision, len(ds))
	for i, d := range ds {
		out[i] = h.handle(ctx, d)
	}
	return out
}

func (h *CompensateReservations) handle(ctx context.Context, d ports.Delivery) ports.Decision {
	m, err := message.DecodeReleaseReservation(d.Body)
	if err == nil && !reservation.ValidReleaseReason(reservation.ReleaseReason(m.Reason)) {
		err = errors.Join(message.ErrInvalid, errors.New("unknown release reason "+m.Reason))
	}
	if err != nil {
		return quarantine(ctx, h.uow, h.log, h.group, ports.TopicInventoryCompensate, d, m.MessageID, message.Class(err), err)
	}
	log := h.log.With("message_id", m.MessageID, "reservation_id", m.ReservationID, "order_id", m.OrderID,
		"activity_id", m.ActivityID, "sku_id", m.SKUID, "user_id", m.UserID, "topic", d.Topic,
		"delivery_attempt", d.DeliveryAttempt, "reason", m.Reason, "failure_class", m.FailureClass,
		"trace_id", m.Trace.TraceID)
	ref := ports.ReservationRef{ActivityID: m.ActivityID, SKUID: m.SKUID, ReservationID: m.ReservationID}
	released, err := h.reservations.Release(ctx, ref, reservation.ReleaseReason(m.Reason))
	switch {
	case err == nil:
		h.metrics.CompensationApplied(released)
		if released {
			log.InfoContext(ctx, "reservation released", "decision", "released")
			return ports.Acked("released")
		}
		log.InfoContext(ctx, "reservation already released", "decision", "duplicate")
		return ports.Acked("duplicate")
	case errors.Is(err, ports.ErrNotFound):
		return quarantine(ctx, h.uow, h.log, h.group, ports.TopicInventoryCompensate, d, m.MessageID, "RESERVATION_MISSING", err)
	}
	exhausted := d.DeliveryAttempt >= m.MaxAttempts || !h.clock.Now().Before(m.RetryUntil)
	log.WarnContext(ctx, "release failed", "error_class", classify(err), "error", err, "budget_exhausted", exhausted)
	if exhausted {
		// Leave it to the broker: without an ACK the group's retry limit
		// moves it to the dead-letter queue; no faster retries from here.
		return ports.RetryLater("exhausted", retryMax)
	}
	return retry(d, classify(err))
}
