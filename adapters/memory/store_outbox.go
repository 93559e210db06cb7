package memory

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/seckill-dev/seckill/ports"
)

// AppendOutbox stores msgs as unpublished rows, due at once, with
// increasing ids taken from a sequence that is not rolled back. A message
// with both MessageGroup and DeliverAt fails the call (the table's CHECK).
func (t *tx) AppendOutbox(ctx context.Context, msgs []ports.OutboundMessage) error {
	after, err := t.enter(ctx, "AppendOutbox")
	if err != nil {
		return err
	}
	defer t.mu.Unlock()
	for _, m := range msgs {
		if m.MessageGroup != "" && !m.DeliverAt.IsZero() {
			return fmt.Errorf("memory store AppendOutbox: message %s: message group and deliver-at are exclusive", m.MessageID)
		}
	}
	for _, m := range msgs {
		id := t.s.outboxSeq.Add(1)
		m = cloneMessage(m)
		m.DeliverAt = pgTime(m.DeliverAt)
		t.outbox.put(id, OutboxRow{
			Record: ports.OutboxRecord{ID: id, Message: m},
			TxSeq:  t.seq, CreatedAt: t.now, AvailableAt: t.now,
		})
		t.unpublished.put(id, struct{}{})
	}
	return after
}

// ClaimOutbox returns up to limit unpublished rows that are due (available
// at or before the transaction's Now) and were written by committed
// transactions (not by this one), oldest first. A row of a FIFO message
// group is not returned while an earlier unpublished row of the same group
// is not returned too (not due or beyond limit), so a relay never
// publishes a group out of order. Transactions are serialized, so there is
// nothing to lock: two relays never run ClaimOutbox at the same time.
func (t *tx) ClaimOutbox(ctx context.Context, limit int) ([]ports.OutboxRecord, error) {
	after, err := t.enter(ctx, "ClaimOutbox")
	if err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	if after != nil {
		return nil, after
	}
	if limit <= 0 {
		return nil, nil
	}
	var rows []OutboxRow
	t.unpublished.each(func(id int64, _ struct{}) bool {
		if row, ok := t.outbox.get(id); ok {
			rows = append(rows, row)
		}
		return true
	})
	slices.SortFunc(rows, func(a, b OutboxRow) int { return cmp.Compare(a.Record.ID, b.Record.ID) })
	blocked := map[string]bool{}
	var out []ports.OutboxRecord
	for _, row := range rows {
		if len(out) == limit {
			break
		}
		group := row.Record.Message.MessageGroup
		if group != "" && blocked[group] {
			continue
		}
		if row.TxSeq == t.seq || row.AvailableAt.After(t.now) {
			if group != "" {
				blocked[group] = true
			}
			continue
		}
		rec := row.Record
		rec.Message = cloneMessage(rec.Message)
		out = append(out, rec)
	}
	return out, nil
}

// MarkPublished marks the unpublished rows among ids published at the
// transaction's Now; other ids are ignored.
func (t *tx) MarkPublished(ctx context.Context, ids []int64) error {
	after, err := t.enter(ctx, "MarkPublished")
	if err != nil {
		return err
	}
	defer t.mu.Unlock()
	for _, id := range ids {
		row, ok := t.outbox.get(id)
		if !ok || !row.PublishedAt.IsZero() {
			continue
		}
		row.PublishedAt = t.now
		t.outbox.put(id, row)
		t.unpublished.del(id)
	}
	return after
}

// DeferOutbox records a failed publish of the unpublished rows among ids:
// attempts + 1, due again at next, lastErr kept. Other ids are ignored.
func (t *tx) DeferOutbox(ctx context.Context, ids []int64, next time.Time, lastErr string) error {
	after, err := t.enter(ctx, "DeferOutbox")
	if err != nil {
		return err
	}
	defer t.mu.Unlock()
	for _, id := range ids {
		row, ok := t.outbox.get(id)
		if !ok || !row.PublishedAt.IsZero() {
			continue
		}
		row.Record.Attempts++
		row.AvailableAt = pgTime(next)
		row.LastError = lastErr
		t.outbox.put(id, row)
	}
	return after
}

// PruneOutbox deletes up to limit rows published before olderThan, the
// earliest published first, and returns how many it deleted (none for
// limit <= 0).
func (t *tx) PruneOutbox(ctx context.Context, olderThan time.Time, limit int) (int64, error) {
	after, err := t.enter(ctx, "PruneOutbox")
	if err != nil {
		return 0, err
	}
	defer t.mu.Unlock()
	var old []OutboxRow
	t.outbox.each(func(_ int64, row OutboxRow) bool {
		if !row.PublishedAt.IsZero() && row.PublishedAt.Before(olderThan) {
			old = append(old, row)
		}
		return true
	})
	slices.SortFunc(old, func(a, b OutboxRow) int {
		return cmp.Or(a.PublishedAt.Compare(b.PublishedAt), cmp.Compare(a.Record.ID, b.Record.ID))
	})
	old = old[:min(len(old), max(limit, 0))]
	for _, row := range old {
		t.outbox.del(row.Record.ID)
	}
	if after != nil {
		return 0, after
	}
	return int64(len(old)), nil
}

// RecordRejections inserts rejections; one whose order id or reservation
// id has a rejection already (committed or earlier in the call) is skipped,
// keeping the first. A zero RejectedAt is set to the transaction's Now.
func (t *tx) RecordRejections(ctx context.Context, rs []ports.Rejection) error {
	after, err := t.enter(ctx, "RecordRejections")
	if err != nil {
		return err
	}
	defer t.mu.Unlock()
	for _, r := range rs {
		if r.OrderID == "" || r.ReservationID == "" {
			return fmt.Errorf("memory store RecordRejections: order and reservation ids are required (order %q)", r.OrderID)
		}
	}
	for _, r := range rs {
		if t.rejections.has(r.OrderID) || t.rejByRsv.has(r.ReservationID) {
			continue
		}
		if r.RejectedAt.IsZero() {
			r.RejectedAt = t.now
		}
		r.RejectedAt = pgTime(r.RejectedAt)
		t.rejections.put(r.OrderID, RejectionRow{Rejection: r, seq: t.s.nextRowSeq()})
		t.rejByRsv.put(r.ReservationID, r.OrderID)
	}
	return after
}

// Quarantine stores m unless a row with the same (group, broker message
// id) exists, which is kept.
func (t *tx) Quarantine(ctx context.Context, m ports.QuarantinedMessage) error {
	after, err := t.enter(ctx, "Quarantine")
	if err != nil {
		return err
	}
	defer t.mu.Unlock()
	k := quarantineKey{m.ConsumerGroup, m.BrokerMessageID}
	if !t.quarantine.has(k) {
		m.Body = slices.Clone(m.Body)
		m.Properties = maps.Clone(m.Properties)
		t.quarantine.put(k, QuarantineRow{Message: m, CreatedAt: t.now, seq: t.s.nextRowSeq()})
	}
	return after
}

// cloneMessage copies the slices and map of m.
func cloneMessage(m ports.OutboundMessage) ports.OutboundMessage {
	m.Keys = slices.Clone(m.Keys)
	m.Body = slices.Clone(m.Body)
	m.Properties = maps.Clone(m.Properties)
	return m
}
