package application

import (
	"context"
	"log/slog"

	"github.com/seckill-dev/seckill/domain/message"
	"github.com/seckill-dev/seckill/ports"
)

// AuditEvents is the audit consumer (CG_SECKILL_AUDIT_V1) of the order
// domain events (ORDER_CREATED, ORDER_PAID, ORDER_CANCELED). It is the
// model of a downstream consumer with its own inbox (spec 32.15): each
// event is recorded exactly once per message id in the group's inbox,
// which doubles as the audit trail (message id, order id, topic, delivery
// attempt, time), however often the relay publishes or an operator
// replays it.
type AuditEvents struct {
	uow   ports.UnitOfWork
	log   *slog.Logger
	group string
}

// NewAuditEvents wires the handler for consumer group group.
func NewAuditEvents(uow ports.UnitOfWork, log *slog.Logger, group string) *AuditEvents {
	return &AuditEvents{uow: uow, log: log.With("consumer_group", group), group: group}
}

// HandleBatch implements ports.BatchHandler: one transaction records the
// whole batch.
func (h *AuditEvents) HandleBatch(ctx context.Context, ds []ports.Delivery) []ports.Decision {
	out := make([]ports.Decision, len(ds))
	var entries []ports.InboxEntry
	var idx []int
	for i, d := range ds {
		m, err := message.DecodeOrderEvent(d.Body)
		if err != nil {
			out[i] = quarantine(ctx, h.uow, h.log, h.group, ports.TopicOrderEvent, d, m.MessageID, message.Class(err), err)
			continue
		}
		entries = append(entries, ports.InboxEntry{MessageID: m.MessageID, Topic: d.Topic,
			ReservationID: m.ReservationID, OrderID: m.OrderID, DeliveryAttempt: d.DeliveryAttempt})
		idx = append(idx, i)
	}
	if len(entries) == 0 {
		return out
	}
	var fresh []string
	err := h.uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error {
		var err error
		if fresh, err = tx.ClaimInbox(ctx, h.group, entries); err != nil {
			return err
		}
		results := make([]ports.InboxResult, len(fresh))
		for i, id := range fresh {
			results[i] = ports.InboxResult{MessageID: id, Status: ports.InboxSucceeded, Detail: "audited"}
		}
		if len(results) == 0 {
			return nil
		}
		return tx.FinishInbox(ctx, h.group, results)
	})
	isFresh := set(fresh)
	for k, i := range idx {
		switch {
		case err != nil:
			out[i] = retry(ds[i], classify(err))
		case isFresh[entries[k].MessageID]:
			out[i] = ports.Acked("audited")
		default:
			out[i] = ports.Acked("duplicate")
		}
	}
	return out
}
