package application

import (
	"context"
	"fmt"
	"log/slog"
	"time"

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

// errNoActor refuses a state-changing admin action that names no actor:
// every such action is audited under the operator (or system part) that
// asked for it.
var errNoActor = fmt.Errorf("%w: an actor is required for the audit trail", ports.ErrPermissionDenied)

// auditTimeout bounds the write of an audit row outside an action's
// transaction.
const auditTimeout = 10 * time.Second

// auditAlone appends e in a transaction of its own, for an action that has
// no transaction to carry its audit (a reconciliation pass, a projection
// rebuild) or whose transaction had nothing to commit (a replay of an
// unknown dead letter). The write is not canceled with ctx (the action it
// records has happened) but bounded by auditTimeout.
func auditAlone(ctx context.Context, uow ports.UnitOfWork, e ports.AuditEntry) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditTimeout)
	defer cancel()
	if err := uow.InTx(ctx, func(ctx context.Context, tx ports.Tx) error { return tx.AppendAudit(ctx, e) }); err != nil {
		return fmt.Errorf("audit %s %s: %w", e.Action, e.Target, err)
	}
	return nil
}
