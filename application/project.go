package application

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

// ProjectOrderStates is the FIFO projection consumer's handler
// (CG_SECKILL_ORDER_QUERY_PROJECTION_V1, ordered by order id). It keeps the
// Redis query view that GetOrder reads: a state change applies only when
// its aggregate_version is newer than the view's (the compare happens in
// Redis, so duplicates, replays and late messages cannot move a view
// back). When a message does not follow the stored version (a gap: a
// state change went missing or arrives late), the handler does not skip
// ahead blindly: it reads the order's authoritative state from PostgreSQL
// and applies that, so the view never shows a state the event stream does
// not have. A CREATED state also repairs the Redis reservation's write-back
// (ORDERED), which the order-create consumer does best effort.
type ProjectOrderStates struct {
	views        ports.OrderViews
	orders       ports.OrderQueries
	reservations ports.Reservations
	uow          ports.UnitOfWork
	log          *slog.Logger
	group        string
}

// NewProjectOrderStates wires the handler for consumer group group.
func NewProjectOrderStates(views ports.OrderViews, orders ports.OrderQueries, reservations ports.Reservations,
	uow ports.UnitOfWork, log *slog.Logger, group string) *ProjectOrderStates {
	return &ProjectOrderStates{views: views, orders: orders, reservations: reservations, uow: uow,
		log: log.With("consumer_group", group), group: group}
}

// HandleBatch implements ports.BatchHandler. Deliveries are handled one by
// one in order (the FIFO contract: messages of one order id arrive in
// order and must be applied in order).
func (h *ProjectOrderStates) HandleBatch(ctx context.Context, ds []ports.Delivery) []ports.Decision {
	out := make([]ports.Decision, len(ds))
	for i, d := range ds {
		out[i] = h.handle(ctx, d)
		if !out[i].Ack {
			// Keep the order: the rest of the batch waits for this one.
			for j := i + 1; j < len(ds); j++ {
				out[j] = ports.RetryLater("blocked", out[i].RetryAfter)
			}
			break
		}
	}
	return out
}

func (h *ProjectOrderStates) handle(ctx context.Context, d ports.Delivery) ports.Decision {
	m, err := message.DecodeOrderStateChanged(d.Body)
	if err != nil {
		return quarantine(ctx, h.uow, h.log, h.group, ports.TopicOrderStateFIFO, d, m.MessageID, message.Class(err), err)
	}
	log := h.log.With("message_id", m.MessageID, "order_id", m.OrderID, "aggregate_version", m.AggregateVersion,
		"topic", d.Topic, "delivery_attempt", d.DeliveryAttempt, "trace_id", m.Trace.TraceID)
	var stored int64
	switch v, err := h.views.Get(ctx, m.OrderID); {
	case err == nil:
		stored = v.AggregateVersion
	case errors.Is(err, ports.ErrNotFound):
	default:
		log.WarnContext(ctx, "read view failed", "error", err)
		return retry(d, classify(err))
	}
	if m.AggregateVersion <= stored {
		return ports.Acked("stale")
	}
	v := stateView(m.OrderState)
	outcome := "applied"
	if m.PreviousVersion != stored {
		// A gap: fetch the authoritative state instead of skipping.
		pg, err := h.orders.GetOrderView(ctx, m.OrderID)
		switch {
		case err == nil && pg.AggregateVersion >= m.AggregateVersion:
			v, outcome = pg, "gap_filled"
		case err == nil, errors.Is(err, ports.ErrNotFound):
			// PostgreSQL cannot be behind a committed change; keep the
			// message's state.
		default:
			log.WarnContext(ctx, "gap fill failed", "error", err)
			return retry(d, classify(err))
		}
		log.InfoContext(ctx, "projection gap", "stored_version", stored, "previous_version", m.PreviousVersion,
			"applied_version", v.AggregateVersion)
	}
	if _, err := h.views.Apply(ctx, v); err != nil {
		log.WarnContext(ctx, "apply view failed", "error", err)
		return retry(d, classify(err))
	}
	if m.Status == string(ports.OrderCreated) && m.PreviousVersion == 0 {
		ref := ports.ReservationRef{ActivityID: m.ActivityID, SKUID: m.SKUID, ReservationID: m.ReservationID}
		if err := h.reservations.MarkOrdered(ctx, []ports.ReservationRef{ref}); err != nil {
			log.WarnContext(ctx, "reservation write-back failed", "error", err)
		}
	}
	return ports.Acked(outcome)
}

// stateView converts a state message to the query view.
func stateView(s message.OrderState) ports.OrderView {
	st := ports.OrderStatus(s.Status)
	if st == "PAYING" {
		st = ports.OrderCreated
	}
	return ports.OrderView{
		OrderID: s.OrderID, ReservationID: s.ReservationID, ActivityID: s.ActivityID, SKUID: s.SKUID,
		UserID: s.UserID, Status: st, Reason: s.Reason, AggregateVersion: s.AggregateVersion,
		PaymentID: s.PaymentID, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt, ExpiresAt: s.ExpiresAt,
		PaidAt: s.PaidAt, CanceledAt: s.CanceledAt,
	}
}

// Rebuild recomputes the query view of every order from the event store
// (and of every rejection) and applies it; since views only move forward by
// version, a rebuild can run while the projection consumer runs. It
// returns how many views it applied or confirmed.
func (h *ProjectOrderStates) Rebuild(ctx context.Context) (int, error) {
	n := 0
	for after := ""; ; {
		var streams [][]order.Event
		if err := h.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
			var err error
			streams, err = tx.OrderStreams(ctx, after, 500)
			return err
		}); err != nil {
			return n, fmt.Errorf("read order streams: %w", err)
		}
		if len(streams) == 0 {
			break
		}
		for _, events := range streams {
			o, err := order.Rehydrate(events)
			if err != nil {
				return n, fmt.Errorf("rehydrate %s: %w", events[0].OrderID, err)
			}
			if _, err := h.views.Apply(ctx, view(o.Snapshot())); err != nil {
				return n, fmt.Errorf("apply view %s: %w", events[0].OrderID, err)
			}
			n++
			after = events[0].OrderID
		}
	}
	for after := ""; ; {
		var rs []ports.Rejection
		if err := h.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
			var err error
			rs, err = tx.Rejections(ctx, after, 500)
			return err
		}); err != nil {
			return n, fmt.Errorf("read rejections: %w", err)
		}
		if len(rs) == 0 {
			break
		}
		for _, r := range rs {
			v := ports.OrderView{OrderID: r.OrderID, ReservationID: r.ReservationID, ActivityID: r.ActivityID,
				SKUID: r.SKUID, UserID: r.UserID, Status: ports.OrderRejected, Reason: r.Reason,
				AggregateVersion: 1, CreatedAt: r.RejectedAt, UpdatedAt: r.RejectedAt}
			if _, err := h.views.Apply(ctx, v); err != nil {
				return n, fmt.Errorf("apply view %s: %w", r.OrderID, err)
			}
			n++
			after = r.OrderID
		}
	}
	return n, nil
}
