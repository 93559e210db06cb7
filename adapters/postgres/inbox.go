package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/seckill-dev/seckill/ports"
)

// ClaimInbox implements ports.InboxStore with one INSERT ... SELECT FROM
// unnest ... ON CONFLICT DO NOTHING. Entries are inserted in message id
// order so that two transactions claiming overlapping batches wait for each
// other instead of deadlocking; the claimed ids are returned in input
// order. Entries already present count in inbox_insert_conflict_total.
func (t *tx) ClaimInbox(ctx context.Context, group string, entries []ports.InboxEntry) ([]string, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	key := func(e ports.InboxEntry) string { return e.MessageID }
	unique, sorted, err := claimSet("claim inbox", entries, key)
	if err != nil {
		return nil, err
	}
	n := len(sorted)
	ids, topics, rsvs, ords := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	attempts := make([]int32, n)
	for i, e := range sorted {
		ids[i], topics[i], rsvs[i], ords[i], attempts[i] = e.MessageID, e.Topic, e.ReservationID, e.OrderID, e.DeliveryAttempt
	}
	inserted, err := query(ctx, t, "claim inbox", `
		INSERT INTO consumer_inbox
		    (consumer_group, message_id, topic, reservation_id, order_id, status, delivery_attempt,
		     received_at, created_at, updated_at)
		SELECT $1, u.message_id, u.topic, NULLIF(u.reservation_id, ''), NULLIF(u.order_id, ''),
		       'PROCESSING', u.delivery_attempt,
		       coalesce($7::timestamptz, now()), coalesce($7::timestamptz, now()), coalesce($7::timestamptz, now())
		FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::int[])
		     WITH ORDINALITY AS u(message_id, topic, reservation_id, order_id, delivery_attempt, ord)
		ORDER BY u.ord
		ON CONFLICT (consumer_group, message_id) DO NOTHING
		RETURNING message_id`,
		pgx.RowTo[string], group, ids, topics, rsvs, ords, attempts, t.nowArg())
	if err != nil {
		return nil, err
	}
	claimed := claimedInOrder(unique, key, inserted)
	if conflicts := len(unique) - len(claimed); conflicts > 0 {
		t.store.metrics.inboxConflicts.Add(float64(conflicts))
	}
	return claimed, nil
}

// FinishInbox implements ports.InboxStore with one UPDATE ... FROM unnest.
// Every result must name a row of group (claimed earlier) and carry a final
// status; otherwise the call fails.
func (t *tx) FinishInbox(ctx context.Context, group string, results []ports.InboxResult) error {
	if len(results) == 0 {
		return nil
	}
	last := make(map[string]int, len(results))
	for i, r := range results {
		switch r.Status {
		case ports.InboxSucceeded, ports.InboxRejected, ports.InboxDuplicate, ports.InboxNoop:
		default:
			return fmt.Errorf("postgres: finish inbox %s: invalid final status %q", r.MessageID, r.Status)
		}
		last[r.MessageID] = i
	}
	ids := make([]string, 0, len(last))
	statuses := make([]string, 0, len(last))
	details := make([]string, 0, len(last))
	for i, r := range results {
		if last[r.MessageID] == i {
			ids = append(ids, r.MessageID)
			statuses = append(statuses, string(r.Status))
			details = append(details, r.Detail)
		}
	}
	n, err := t.exec(ctx, "finish inbox", `
		UPDATE consumer_inbox i
		SET status = u.status, detail = NULLIF(u.detail, ''), updated_at = coalesce($5::timestamptz, now())
		FROM unnest($2::text[], $3::text[], $4::text[]) AS u(message_id, status, detail)
		WHERE i.consumer_group = $1 AND i.message_id = u.message_id`,
		group, ids, statuses, details, t.nowArg())
	if err != nil {
		return err
	}
	if n != int64(len(ids)) {
		return fmt.Errorf("postgres: finish inbox: %d of %d messages have no inbox row in group %q: %w",
			int64(len(ids))-n, len(ids), group, ports.ErrNotFound)
	}
	return nil
}

// InboxStatusOf implements ports.InboxStore.
func (t *tx) InboxStatusOf(ctx context.Context, group, messageID string) (ports.InboxStatus, error) {
	var status string
	err := t.queryRow(ctx, "inbox status", `
		SELECT status FROM consumer_inbox WHERE consumer_group = $1 AND message_id = $2`,
		group, messageID).Scan(&status)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("postgres: inbox status of %s in %s: %w", messageID, group, ports.ErrNotFound)
	}
	if err != nil {
		return "", err
	}
	return ports.InboxStatus(status), nil
}
