package memory

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/seckill-dev/seckill/ports"
)

// The dead-letter statuses.
const (
	deadLetterOpen     = "OPEN"
	deadLetterReplayed = "REPLAYED"
	deadLetterResolved = "RESOLVED"
)

// DeadLetterRow is a stored dead letter: the listed fields and the record
// a replay republishes.
type DeadLetterRow struct {
	DeadLetter ports.DeadLetter
	// Record holds the first arrival's topic, body, properties, tag, keys
	// and message group, and the latest arrival's broker message id, error
	// class, last error and attempts; SeenAt is the last-seen time.
	Record ports.DeadLetterRecord
}

// RecordDeadLetter stores r keyed by (consumer group, message id), as the
// PostgreSQL adapter does: the first arrival inserts an OPEN row with a new
// id from a sequence that is not rolled back (first and last seen =
// r.SeenAt, or the transaction's Now when zero) and returns (id, true). A
// later arrival with another broker message id sets last seen to the later
// of both times, attempts to the larger of both counts, error class, last
// error and broker message id to the new ones, reopens the row and
// returns (id, false); the payload (body, properties, tag, keys, message
// group, topic) stays the first arrival's. The same broker message again
// changes nothing and returns (id, false). An empty group or message id,
// or negative attempts, fail the call.
func (t *tx) RecordDeadLetter(ctx context.Context, r ports.DeadLetterRecord) (int64, bool, error) {
	after, err := t.enter(ctx, "RecordDeadLetter")
	if err != nil {
		return 0, false, err
	}
	defer t.mu.Unlock()
	if r.ConsumerGroup == "" || r.MessageID == "" {
		return 0, false, fmt.Errorf("memory store RecordDeadLetter: consumer group and message id are required")
	}
	if r.Attempts < 0 {
		return 0, false, fmt.Errorf("memory store RecordDeadLetter: message %s: negative attempts %d", r.MessageID, r.Attempts)
	}
	seen := pgTime(r.SeenAt)
	if seen.IsZero() {
		seen = t.now
	}
	key := deadLetterKey{r.ConsumerGroup, r.MessageID}
	id, exists := t.dlByMessage.get(key)
	created := !exists
	switch {
	case created:
		id = t.s.deadLetterSeq.Add(1)
		rec := cloneDeadLetterRecord(r)
		rec.SeenAt = seen
		t.deadLetters.put(id, DeadLetterRow{
			DeadLetter: ports.DeadLetter{
				ID: id, ConsumerGroup: r.ConsumerGroup, Topic: string(r.Topic), MessageID: r.MessageID,
				ErrorClass: r.ErrorClass, LastError: r.LastError, Attempts: r.Attempts,
				FirstSeenAt: seen, LastSeenAt: seen, Status: deadLetterOpen,
			},
			Record: rec,
		})
		t.dlByMessage.put(key, id)
	default:
		row, _ := t.deadLetters.get(id)
		if row.Record.BrokerMessageID == r.BrokerMessageID {
			break // the same arrival again
		}
		d := &row.DeadLetter
		if seen.After(d.LastSeenAt) {
			d.LastSeenAt = seen
		}
		d.Attempts = max(d.Attempts, r.Attempts)
		d.ErrorClass, d.LastError, d.Status = r.ErrorClass, r.LastError, deadLetterOpen
		row.Record.BrokerMessageID = r.BrokerMessageID
		t.deadLetters.put(id, row)
	}
	if after != nil {
		return 0, false, after
	}
	return id, created, nil
}

// ListDeadLetters returns up to limit dead letters with id < beforeID
// (every one when beforeID <= 0), highest id first, of group only when it
// is not empty. A limit <= 0 returns nothing.
func (t *tx) ListDeadLetters(ctx context.Context, group string, limit int, beforeID int64) ([]ports.DeadLetter, error) {
	after, err := t.enter(ctx, "ListDeadLetters")
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
	var out []ports.DeadLetter
	t.deadLetters.each(func(id int64, row DeadLetterRow) bool {
		if (beforeID <= 0 || id < beforeID) && (group == "" || row.DeadLetter.ConsumerGroup == group) {
			out = append(out, row.DeadLetter)
		}
		return true
	})
	slices.SortFunc(out, func(a, b ports.DeadLetter) int { return cmp.Compare(b.ID, a.ID) })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// GetDeadLetter returns a copy of the dead letter with its record (Record
// fields as DeadLetterRow describes), or ports.ErrNotFound. Transactions
// are serialized, so the row is "locked" until this transaction ends.
func (t *tx) GetDeadLetter(ctx context.Context, id int64) (ports.StoredDeadLetter, error) {
	after, err := t.enter(ctx, "GetDeadLetter")
	if err != nil {
		return ports.StoredDeadLetter{}, err
	}
	defer t.mu.Unlock()
	if after != nil {
		return ports.StoredDeadLetter{}, after
	}
	row, ok := t.deadLetters.get(id)
	if !ok {
		return ports.StoredDeadLetter{}, fmt.Errorf("dead letter %d: %w", id, ports.ErrNotFound)
	}
	rec := cloneDeadLetterRecord(row.Record)
	d := row.DeadLetter
	rec.ConsumerGroup, rec.MessageID = d.ConsumerGroup, d.MessageID
	rec.ErrorClass, rec.LastError, rec.Attempts, rec.SeenAt = d.ErrorClass, d.LastError, d.Attempts, d.LastSeenAt
	return ports.StoredDeadLetter{DeadLetter: d, Record: rec}, nil
}

// MarkReplayed sets the dead letter's status to REPLAYED, increments its
// replay count and returns the new count; ports.ErrNotFound for an unknown
// id.
func (t *tx) MarkReplayed(ctx context.Context, id int64) (int32, error) {
	after, err := t.enter(ctx, "MarkReplayed")
	if err != nil {
		return 0, err
	}
	defer t.mu.Unlock()
	row, ok := t.deadLetters.get(id)
	if !ok {
		return 0, fmt.Errorf("memory store MarkReplayed: dead letter %d: %w", id, ports.ErrNotFound)
	}
	row.DeadLetter.Status = deadLetterReplayed
	row.DeadLetter.ReplayCount++
	t.deadLetters.put(id, row)
	if after != nil {
		return 0, after
	}
	return row.DeadLetter.ReplayCount, nil
}

// MarkResolved sets the dead letter's status to RESOLVED; ports.ErrNotFound
// for an unknown id.
func (t *tx) MarkResolved(ctx context.Context, id int64) error {
	after, err := t.enter(ctx, "MarkResolved")
	if err != nil {
		return err
	}
	defer t.mu.Unlock()
	row, ok := t.deadLetters.get(id)
	if !ok {
		return fmt.Errorf("memory store MarkResolved: dead letter %d: %w", id, ports.ErrNotFound)
	}
	row.DeadLetter.Status = deadLetterResolved
	t.deadLetters.put(id, row)
	return after
}

// DeadLetterStats counts the OPEN dead letters and returns the earliest
// first-seen time among them (zero when there are none).
func (t *tx) DeadLetterStats(ctx context.Context) (ports.DeadLetterStats, error) {
	after, err := t.enter(ctx, "DeadLetterStats")
	if err != nil {
		return ports.DeadLetterStats{}, err
	}
	defer t.mu.Unlock()
	if after != nil {
		return ports.DeadLetterStats{}, after
	}
	var st ports.DeadLetterStats
	t.deadLetters.each(func(_ int64, row DeadLetterRow) bool {
		d := row.DeadLetter
		if d.Status != deadLetterOpen {
			return true
		}
		st.Open++
		if st.OldestOpenAt.IsZero() || d.FirstSeenAt.Before(st.OldestOpenAt) {
			st.OldestOpenAt = d.FirstSeenAt
		}
		return true
	})
	return st, nil
}

// cloneDeadLetterRecord copies r's slices and map; empty ones become nil,
// as they read back from PostgreSQL.
func cloneDeadLetterRecord(r ports.DeadLetterRecord) ports.DeadLetterRecord {
	r.Body = slices.Clone(r.Body)
	r.Keys = slices.Clone(r.Keys)
	r.Properties = maps.Clone(r.Properties)
	if len(r.Keys) == 0 {
		r.Keys = nil
	}
	if len(r.Properties) == 0 {
		r.Properties = nil
	}
	return r
}
