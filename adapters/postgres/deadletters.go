package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/seckill-dev/seckill/ports"
)

// RecordDeadLetter implements ports.DeadLetterStore on dead_letters, keyed
// by UNIQUE(consumer_group, message_id):
//
//   - the first arrival inserts an OPEN row (first_seen_at = last_seen_at =
//     r.SeenAt, or the transaction's now when it is zero) and returns
//     (id, true);
//   - a later arrival (another broker message, for example a replay that
//     failed again) sets last_seen_at to the later of the stored and the
//     new time, attempts to the larger of the stored and the new count
//     (each arrival reports the deliveries of its own round of retries,
//     so the count never goes down), last_error, error_class and
//     broker_message_id to the new arrival's, reopens the row (OPEN) and
//     returns (id, false). Body, properties, tag, keys and message group
//     stay those of the first arrival: replays republish the original;
//   - the same broker message again (same broker_message_id: a redelivery
//     of a dead letter already recorded, whose acknowledgement was lost)
//     changes nothing and returns (id, false), so it never reopens a row
//     an operator already handled.
//
// It costs one statement for a first arrival, two for a later one and three
// for a repeated one: INSERT ... ON CONFLICT DO NOTHING, then UPDATE, then
// SELECT, each with its own READ COMMITTED snapshot, so a row inserted by a
// concurrent transaction that committed meanwhile is found (the INSERT
// waits for it). Concurrent first arrivals therefore leave one row.
func (t *tx) RecordDeadLetter(ctx context.Context, r ports.DeadLetterRecord) (int64, bool, error) {
	if r.ConsumerGroup == "" || r.MessageID == "" {
		return 0, false, errors.New("postgres: record dead letter: consumer group and message id are required")
	}
	if r.Attempts < 0 {
		return 0, false, fmt.Errorf("postgres: record dead letter %s: negative attempts %d", r.MessageID, r.Attempts)
	}
	props, err := json.Marshal(nonNilMap(r.Properties))
	if err != nil {
		return 0, false, fmt.Errorf("postgres: record dead letter %s: encode properties: %w", r.MessageID, err)
	}
	seen := timestamptz(r.SeenAt)
	if !seen.Valid {
		seen = t.nowArg() // NULL without Config.Clock: the SQL takes now()
	}
	var id int64
	err = t.queryRow(ctx, "record dead letter", `
		INSERT INTO dead_letters
		    (consumer_group, topic, message_id, broker_message_id, error_class, last_error, attempts,
		     first_seen_at, last_seen_at, body, properties, tag, keys, message_group)
		VALUES ($1, $2, $3, $4, $5, $6, $7,
		        coalesce($8, now()), coalesce($8, now()), $9, $10::jsonb, $11, $12, $13)
		ON CONFLICT (consumer_group, message_id) DO NOTHING
		RETURNING id`,
		r.ConsumerGroup, string(r.Topic), r.MessageID, r.BrokerMessageID, r.ErrorClass, r.LastError, r.Attempts,
		seen, nonNilBytes(r.Body), string(props), r.Tag, nonNil(r.Keys), r.MessageGroup).Scan(&id)
	if err == nil {
		return id, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return 0, false, err
	}
	err = t.queryRow(ctx, "record dead letter again", `
		UPDATE dead_letters
		SET last_seen_at = greatest(last_seen_at, coalesce($6, now())),
		    attempts = greatest(attempts, $5),
		    last_error = $4, error_class = $3, broker_message_id = $7, status = 'OPEN'
		WHERE consumer_group = $1 AND message_id = $2 AND broker_message_id <> $7
		RETURNING id`,
		r.ConsumerGroup, r.MessageID, r.ErrorClass, r.LastError, r.Attempts, seen, r.BrokerMessageID).Scan(&id)
	if err == nil {
		return id, false, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return 0, false, err
	}
	err = t.queryRow(ctx, "record dead letter repeated", `
		SELECT id FROM dead_letters WHERE consumer_group = $1 AND message_id = $2`,
		r.ConsumerGroup, r.MessageID).Scan(&id)
	if err != nil {
		// The row was seen by the INSERT: it can only be gone if someone
		// deleted it meanwhile.
		return 0, false, fmt.Errorf("postgres: record dead letter %s of %s: row vanished: %w", r.MessageID, r.ConsumerGroup, err)
	}
	return id, false, nil
}

// deadLetterColumns are the columns scanDeadLetter reads.
const deadLetterColumns = `id, consumer_group, topic, message_id, error_class, last_error, attempts,
	first_seen_at, last_seen_at, replay_count, status`

func scanDeadLetter(r pgx.CollectableRow) (ports.DeadLetter, error) {
	var d ports.DeadLetter
	if err := r.Scan(&d.ID, &d.ConsumerGroup, &d.Topic, &d.MessageID, &d.ErrorClass, &d.LastError, &d.Attempts,
		&d.FirstSeenAt, &d.LastSeenAt, &d.ReplayCount, &d.Status); err != nil {
		return ports.DeadLetter{}, err
	}
	d.FirstSeenAt, d.LastSeenAt = d.FirstSeenAt.UTC(), d.LastSeenAt.UTC()
	return d, nil
}

// ListDeadLetters implements ports.DeadLetterStore: up to limit rows with
// id < beforeID (every row when beforeID <= 0), newest (highest id) first,
// of group only when group is not empty. A limit <= 0 returns nothing.
// The unfiltered list walks the primary key backwards, a group's list the
// index dead_letters_group_id (migration 00012); the two cases are two
// statements so that each gets its own plan.
func (t *tx) ListDeadLetters(ctx context.Context, group string, limit int, beforeID int64) ([]ports.DeadLetter, error) {
	if limit <= 0 {
		return nil, nil
	}
	before := beforeID
	if before <= 0 {
		before = math.MaxInt64
	}
	if group == "" {
		return query(ctx, t, "list dead letters", `
			SELECT `+deadLetterColumns+` FROM dead_letters
			WHERE id < $1 ORDER BY id DESC LIMIT $2`,
			scanDeadLetter, before, limit)
	}
	return query(ctx, t, "list dead letters of group", `
		SELECT `+deadLetterColumns+` FROM dead_letters
		WHERE consumer_group = $1 AND id < $2 ORDER BY id DESC LIMIT $3`,
		scanDeadLetter, group, before, limit)
}

// GetDeadLetter implements ports.DeadLetterStore with SELECT ... FOR
// UPDATE: a concurrent GetDeadLetter (a second replay) of the same row
// waits until this transaction ends and then reads the committed result
// (replay count, status). Record carries the stored fields: the logical
// topic, the first arrival's payload, tag, keys and message group, the
// latest arrival's broker message id, error and attempts, and SeenAt =
// last_seen_at. ports.ErrNotFound for an unknown id.
func (t *tx) GetDeadLetter(ctx context.Context, id int64) (ports.StoredDeadLetter, error) {
	var (
		d     ports.StoredDeadLetter
		props map[string]string
	)
	rec := &d.Record
	err := t.queryRow(ctx, "get dead letter", `
		SELECT `+deadLetterColumns+`, broker_message_id, tag, keys, message_group, body, properties
		FROM dead_letters WHERE id = $1
		FOR UPDATE`, id).Scan(
		&d.ID, &d.ConsumerGroup, &d.Topic, &d.MessageID, &d.ErrorClass, &d.LastError, &d.Attempts,
		&d.FirstSeenAt, &d.LastSeenAt, &d.ReplayCount, &d.Status,
		&rec.BrokerMessageID, &rec.Tag, &rec.Keys, &rec.MessageGroup, &rec.Body, &props)
	if errors.Is(err, pgx.ErrNoRows) {
		return ports.StoredDeadLetter{}, fmt.Errorf("postgres: dead letter %d: %w", id, ports.ErrNotFound)
	}
	if err != nil {
		return ports.StoredDeadLetter{}, err
	}
	d.FirstSeenAt, d.LastSeenAt = d.FirstSeenAt.UTC(), d.LastSeenAt.UTC()
	rec.ConsumerGroup, rec.Topic, rec.MessageID = d.ConsumerGroup, ports.Topic(d.Topic), d.MessageID
	rec.ErrorClass, rec.LastError, rec.Attempts, rec.SeenAt = d.ErrorClass, d.LastError, d.Attempts, d.LastSeenAt
	rec.Properties = props
	if len(rec.Keys) == 0 {
		rec.Keys = nil
	}
	if len(rec.Properties) == 0 {
		rec.Properties = nil
	}
	return d, nil
}

// MarkReplayed implements ports.DeadLetterStore: status REPLAYED,
// replay_count + 1, returning the new count; ports.ErrNotFound for an
// unknown id.
func (t *tx) MarkReplayed(ctx context.Context, id int64) (int32, error) {
	var count int32
	err := t.queryRow(ctx, "mark dead letter replayed", `
		UPDATE dead_letters SET status = 'REPLAYED', replay_count = replay_count + 1
		WHERE id = $1 RETURNING replay_count`, id).Scan(&count)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("postgres: mark dead letter %d replayed: %w", id, ports.ErrNotFound)
	}
	return count, err
}

// MarkResolved implements ports.DeadLetterStore: status RESOLVED;
// ports.ErrNotFound for an unknown id.
func (t *tx) MarkResolved(ctx context.Context, id int64) error {
	n, err := t.exec(ctx, "mark dead letter resolved", `
		UPDATE dead_letters SET status = 'RESOLVED' WHERE id = $1`, id)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("postgres: mark dead letter %d resolved: %w", id, ports.ErrNotFound)
	}
	return nil
}

// DeadLetterStats implements ports.DeadLetterStore in one statement (an
// index-only scan of dead_letters_open; the status is a literal so that
// even a generic plan can use the partial index): the number of OPEN rows and the
// earliest first_seen_at among them (zero when there are none).
func (t *tx) DeadLetterStats(ctx context.Context) (ports.DeadLetterStats, error) {
	var (
		st     ports.DeadLetterStats
		oldest pgtype.Timestamptz
	)
	if err := t.queryRow(ctx, "dead letter stats", `
		SELECT count(*), min(first_seen_at) FROM dead_letters WHERE status = 'OPEN'`).
		Scan(&st.Open, &oldest); err != nil {
		return ports.DeadLetterStats{}, err
	}
	st.OldestOpenAt = timeOf(oldest)
	return st, nil
}
