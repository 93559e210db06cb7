package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/seckill-dev/seckill/ports"
)

// AppendOutbox implements ports.OutboxStore with one INSERT ... SELECT FROM
// unnest. Each row records the writing transaction's id (column default
// pg_current_xact_id()), which ClaimOutbox uses as its fence. Keys and
// properties travel as JSON because PostgreSQL arrays cannot be ragged.
func (t *tx) AppendOutbox(ctx context.Context, msgs []ports.OutboundMessage) error {
	if len(msgs) == 0 {
		return nil
	}
	n := len(msgs)
	topic, msgID, tag, keys, group, props := make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n)
	deliverAt := make([]pgtype.Timestamptz, n)
	body := make([][]byte, n)
	for i, m := range msgs {
		if m.MessageID == "" || m.Topic == "" {
			return fmt.Errorf("postgres: append outbox: message %d lacks a topic or message id", i)
		}
		if m.MessageGroup != "" && !m.DeliverAt.IsZero() {
			return fmt.Errorf("postgres: append outbox: message %s has both a message group and a delivery time", m.MessageID)
		}
		k, err := json.Marshal(nonNil(m.Keys))
		if err != nil {
			return fmt.Errorf("postgres: append outbox: encode keys of %s: %w", m.MessageID, err)
		}
		p, err := json.Marshal(nonNilMap(m.Properties))
		if err != nil {
			return fmt.Errorf("postgres: append outbox: encode properties of %s: %w", m.MessageID, err)
		}
		topic[i], msgID[i], tag[i], keys[i], group[i], props[i] = string(m.Topic), m.MessageID, m.Tag, string(k), m.MessageGroup, string(p)
		deliverAt[i], body[i] = timestamptz(m.DeliverAt), nonNilBytes(m.Body)
	}
	_, err := t.exec(ctx, "append outbox", `
		INSERT INTO event_outbox (topic, message_id, tag, keys, message_group, deliver_at, body, properties,
		                          created_at, available_at)
		SELECT u.topic, u.message_id, u.tag,
		       ARRAY(SELECT jsonb_array_elements_text(u.keys::jsonb)),
		       NULLIF(u.message_group, ''), u.deliver_at, u.body, u.properties::jsonb,
		       coalesce($9::timestamptz, now()), coalesce($9::timestamptz, now())
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::bytea[], $8::text[])
		     WITH ORDINALITY AS u(topic, message_id, tag, keys, message_group, deliver_at, body, properties, ord)
		ORDER BY u.ord`,
		topic, msgID, tag, keys, group, deliverAt, body, props, t.nowArg())
	return err
}

// ClaimOutbox implements ports.OutboxStore. It locks (FOR UPDATE SKIP
// LOCKED) up to limit unpublished rows that are due (available_at at or
// before the transaction's now), in (txid, id) order,
// taking only rows whose writing transaction is older than every
// transaction still in flight: txid < pg_snapshot_xmin(pg_current_snapshot()).
// Without that fence a relay could publish a younger transaction's row and
// move on while an older transaction is still about to commit its rows
// (a sequence gap that is later filled); with it, rows become claimable
// only once no older writer can still add any. Consequence: a long-running
// writing transaction anywhere in the database holds the relay back until
// it ends.
//
// A row with a message group (FIFO topic) is taken only when no earlier
// unpublished row of its group exists (whether deferred, fenced or locked
// by another relay), so several relays never publish one group out of
// order; a group therefore advances by one message per claim, and a relay
// should claim again while claims return rows.
//
// The locks hold until the caller's transaction ends: publish, then
// MarkPublished or DeferOutbox in the same transaction, and keep it short
// (the relay's own transaction id holds the fence for rows written after it
// started).
func (t *tx) ClaimOutbox(ctx context.Context, limit int) ([]ports.OutboxRecord, error) {
	if limit <= 0 {
		return nil, nil
	}
	return query(ctx, t, "claim outbox", `
		SELECT o.id, o.topic, o.message_id, o.tag, o.keys, coalesce(o.message_group, ''),
		       o.deliver_at, o.body, o.properties, o.attempts
		FROM event_outbox o
		WHERE o.published_at IS NULL
		  AND o.available_at <= coalesce($2::timestamptz, now())
		  AND o.txid < pg_snapshot_xmin(pg_current_snapshot())
		  AND (o.message_group IS NULL OR NOT EXISTS (
		        SELECT 1 FROM event_outbox p
		        WHERE p.message_group = o.message_group
		          AND p.published_at IS NULL
		          AND (p.txid, p.id) < (o.txid, o.id)))
		ORDER BY o.txid, o.id
		LIMIT $1
		FOR UPDATE OF o SKIP LOCKED`,
		scanOutbox, limit, t.nowArg())
}

func scanOutbox(r pgx.CollectableRow) (ports.OutboxRecord, error) {
	var (
		rec       ports.OutboxRecord
		topic     string
		deliverAt pgtype.Timestamptz
		props     map[string]string
		attempts  int32
	)
	m := &rec.Message
	if err := r.Scan(&rec.ID, &topic, &m.MessageID, &m.Tag, &m.Keys, &m.MessageGroup,
		&deliverAt, &m.Body, &props, &attempts); err != nil {
		return ports.OutboxRecord{}, err
	}
	m.Topic, m.DeliverAt, m.Properties, rec.Attempts = ports.Topic(topic), timeOf(deliverAt), props, int(attempts)
	if len(m.Keys) == 0 {
		m.Keys = nil
	}
	if len(m.Properties) == 0 {
		m.Properties = nil
	}
	return rec, nil
}

// MarkPublished implements ports.OutboxStore: published_at = the
// transaction's now for the rows not yet marked.
func (t *tx) MarkPublished(ctx context.Context, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := t.exec(ctx, "mark outbox published", `
		UPDATE event_outbox SET published_at = coalesce($2::timestamptz, now())
		WHERE id = ANY($1::bigint[]) AND published_at IS NULL`, ids, t.nowArg())
	return err
}

// DeferOutbox implements ports.OutboxStore: attempts + 1, due again at
// next, last_error kept for operators.
func (t *tx) DeferOutbox(ctx context.Context, ids []int64, next time.Time, lastErr string) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := t.exec(ctx, "defer outbox", `
		UPDATE event_outbox
		SET attempts = attempts + 1, available_at = $2, last_error = NULLIF($3, '')
		WHERE id = ANY($1::bigint[]) AND published_at IS NULL`, ids, next, lastErr)
	return err
}

// HoldOutbox implements ports.OutboxStore: due again at until, attempts
// and last_error unchanged.
func (t *tx) HoldOutbox(ctx context.Context, ids []int64, until time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := t.exec(ctx, "hold outbox", `
		UPDATE event_outbox SET available_at = $2
		WHERE id = ANY($1::bigint[]) AND published_at IS NULL`, ids, until)
	return err
}

// PruneOutbox implements ports.OutboxStore: it deletes up to limit rows
// published before olderThan, oldest first, and returns how many.
func (t *tx) PruneOutbox(ctx context.Context, olderThan time.Time, limit int) (int64, error) {
	if limit <= 0 {
		return 0, nil
	}
	return t.exec(ctx, "prune outbox", `
		DELETE FROM event_outbox
		WHERE id IN (
		    SELECT id FROM event_outbox
		    WHERE published_at IS NOT NULL AND published_at < $1
		    ORDER BY published_at
		    LIMIT $2)`, olderThan, limit)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func nonNilMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func nonNilBytes(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
