package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seckill-dev/seckill/domain/order"
	"github.com/seckill-dev/seckill/ports"
)

// sequencerLockKey is the transaction-level advisory lock that serialises
// the sequencers of every instance: crc32("seckill-event-sequencer").
const sequencerLockKey int64 = 3054623821

var (
	_ ports.EventLog       = (*Store)(nil)
	_ ports.EventSequencer = (*Store)(nil)
)

// errMissingOrder reports an event whose order row does not exist; the
// order row is written in the same transaction as its events, so this is
// a bug, not a state to wait out.
var errMissingOrder = errors.New("postgres: sequence events: an event has no orders row")

// Sequence implements ports.EventSequencer in one transaction:
//
//  1. pg_advisory_xact_lock(sequencerLockKey) serialises all sequencers;
//     the statements after it see what the previous holder committed;
//  2. the cursor (txid, id) of the last event the fence scan reached is
//     read;
//  3. up to limit events not yet in the log, with (txid, id) > cursor and
//     a settled writing transaction, txid < pg_snapshot_xmin(pg_current_snapshot())
//     (the fence F), are selected in (txid, id) order with their order's
//     ids;
//  4. each order's events keep their version order: before an event whose
//     earlier versions are not in the log yet, those versions are placed
//     first (see below);
//  5. the events are inserted into event_log with positions
//     max(position)+1, ... in that order, and the cursor moves to the last
//     event of the fence scan.
//
// Why no settled event can later appear below the cursor: every
// transaction with an id below F had ended when the select's snapshot was
// taken, and its committed rows are visible to that snapshot, so all
// events with txid < F and (txid, id) > cursor were candidates, and the
// batch took the lowest of them. An event not yet visible belongs to a
// transaction still in flight (its id is >= F, the lowest running id) or
// to one that takes its id later (above every id assigned so far, so
// above F too). Either way its txid is >= F > the new cursor's txid, so it
// sorts after the cursor and a later call sequences it. An aborted
// transaction's rows never become visible and leave no gap. The cost of
// the fence: one long writing transaction anywhere in the database holds
// sequencing back until it ends.
//
// Why step 4: (txid, id) order is not always an order's version order. A
// transaction takes its txid at its first write, so one that wrote
// something (an inbox row, another order) before the transaction creating
// version 1 of an order took its own, and only then appended version 2,
// has the lower txid. Version 2 was appended after version 1 committed
// (the append checks the stream's head), so version 1 is committed and
// visible whenever version 2 is a candidate: it is placed just before it,
// even if its own txid is still above the fence. The fence scan later
// meets it again and skips it (it is in the log); the cursor only ever
// follows the fence scan.
//
// An event without its orders row fails the call (errMissingOrder); the
// commit's error is returned (InTx).
func (s *Store) Sequence(ctx context.Context, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	n := 0
	err := s.InTx(ctx, func(ctx context.Context, ptx ports.Tx) error {
		t := ptx.(*tx)
		n = 0
		if _, err := t.exec(ctx, "sequence events: lock", `SELECT pg_advisory_xact_lock($1)`, sequencerLockKey); err != nil {
			return err
		}
		// The cursor comes in as two init-plan values so that the row
		// comparison is an index condition on order_events (txid, id):
		// a join with the cursor table would scan every sequenced event.
		cands, err := query(ctx, t, "sequence events: select", `
			SELECT e.txid::text, e.id, e.aggregate_id, e.aggregate_version, e.event_type, o.activity_id, o.sku_id, o.user_id
			FROM order_events e
			LEFT JOIN orders o ON o.order_id = e.aggregate_id
			WHERE (e.txid, e.id) > ((SELECT txid FROM event_log_cursor), (SELECT id FROM event_log_cursor))
			  AND e.txid < pg_snapshot_xmin(pg_current_snapshot())
			  AND NOT EXISTS (SELECT 1 FROM event_log l WHERE l.event_id = e.id)
			ORDER BY e.txid, e.id
			LIMIT $1`,
			scanSeqEvent, limit)
		if err != nil {
			return err
		}
		if len(cands) == 0 {
			return nil
		}
		earlier, err := earlierVersions(ctx, t, cands)
		if err != nil {
			return err
		}
		placed := make(map[int64]bool, len(cands))
		var batch []seqEvent
		for _, c := range cands {
			for _, p := range earlier[c.aggregate] {
				if p.version < c.version && !placed[p.id] {
					placed[p.id] = true
					batch = append(batch, p)
				}
			}
			if !placed[c.id] {
				placed[c.id] = true
				batch = append(batch, c)
			}
		}
		ids, acts, skus, users := make([]int64, len(batch)), make([]int64, len(batch)), make([]int64, len(batch)), make([]int64, len(batch))
		aggs, types := make([]string, len(batch)), make([]string, len(batch))
		for i, c := range batch {
			if c.activityID == nil || c.skuID == nil || c.userID == nil {
				return fmt.Errorf("%w: event %d of order %s", errMissingOrder, c.id, c.aggregate)
			}
			ids[i], aggs[i], types[i], acts[i], skus[i], users[i] = c.id, c.aggregate, c.eventType, *c.activityID, *c.skuID, *c.userID
		}
		last := cands[len(cands)-1]
		if _, err := t.exec(ctx, "sequence events: insert", `
			WITH base AS (SELECT coalesce(max(position), 0) AS p FROM event_log),
			ins AS (
			    INSERT INTO event_log (position, event_id, aggregate_id, activity_id, sku_id, user_id, event_type)
			    SELECT base.p + u.ord, u.event_id, u.aggregate_id, u.activity_id, u.sku_id, u.user_id, u.event_type
			    FROM base, unnest($1::bigint[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::text[])
			         WITH ORDINALITY AS u(event_id, aggregate_id, activity_id, sku_id, user_id, event_type, ord)
			    RETURNING 1
			)
			UPDATE event_log_cursor SET txid = $7::xid8, id = $8`,
			ids, aggs, acts, skus, users, types, last.txid, last.id); err != nil {
			return err
		}
		n = len(batch)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("postgres: sequence events: %w", err)
	}
	return n, nil
}

// seqEvent is an event the sequencer places, with its order's ids (nil
// when the orders row is missing).
type seqEvent struct {
	txid       string
	id         int64
	aggregate  string
	version    int64
	eventType  string
	activityID *int64
	skuID      *int64
	userID     *int64
}

func scanSeqEvent(r pgx.CollectableRow) (seqEvent, error) {
	var c seqEvent
	err := r.Scan(&c.txid, &c.id, &c.aggregate, &c.version, &c.eventType, &c.activityID, &c.skuID, &c.userID)
	return c, err
}

// earlierVersions returns, per order of cands, the events of that order
// not yet in the log in version order: the versions Sequence must place
// before a candidate. For an order whose candidates start at version 1
// they are the candidates themselves (a later candidate of the scan may
// still be a lower version); for the others they are read (the visible
// events of the order not in the log, whatever their txid).
func earlierVersions(ctx context.Context, t *tx, cands []seqEvent) (map[string][]seqEvent, error) {
	first := map[string]int64{}
	for _, c := range cands {
		if v, ok := first[c.aggregate]; !ok || c.version < v {
			first[c.aggregate] = c.version
		}
	}
	out := make(map[string][]seqEvent, len(first))
	var aggs []string
	for a, v := range first {
		if v > 1 {
			aggs = append(aggs, a)
		}
	}
	for _, c := range cands {
		if first[c.aggregate] == 1 {
			out[c.aggregate] = append(out[c.aggregate], c)
		}
	}
	for _, evs := range out {
		slices.SortFunc(evs, func(a, b seqEvent) int { return cmp.Compare(a.version, b.version) })
	}
	if len(aggs) == 0 {
		return out, nil
	}
	evs, err := query(ctx, t, "sequence events: earlier versions", `
		SELECT e.txid::text, e.id, e.aggregate_id, e.aggregate_version, e.event_type, o.activity_id, o.sku_id, o.user_id
		FROM order_events e
		LEFT JOIN orders o ON o.order_id = e.aggregate_id
		WHERE e.aggregate_id = ANY($1::text[])
		  AND NOT EXISTS (SELECT 1 FROM event_log l WHERE l.event_id = e.id)
		ORDER BY e.aggregate_id, e.aggregate_version`,
		scanSeqEvent, aggs)
	if err != nil {
		return nil, err
	}
	for _, e := range evs {
		out[e.aggregate] = append(out[e.aggregate], e)
	}
	return out, nil
}

// ReadEvents implements ports.EventLog with one statement (one snapshot):
// the events of event_log with position > after matching f, joined with
// order_events, in position order, at most limit, and head = max(position)
// of event_log in the same snapshot, so head >= the last returned position
// and, when fewer than limit events came back, no event in (after, head]
// matching f was left out. Each record carries the traceparent AppendEvents
// recorded with its event (empty when none was). Payloads are decoded (and upcast) with
// order.DecodePayload; an undecodable one fails the call with
// order.ErrCorruptStream.
func (s *Store) ReadEvents(ctx context.Context, after int64, f ports.EventFilter, limit int) ([]ports.EventRecord, int64, error) {
	if limit <= 0 {
		limit = 1
	}
	types := make([]string, len(f.Types))
	for i, t := range f.Types {
		types[i] = string(t)
	}
	var (
		out  []ports.EventRecord
		head int64
	)
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, `
			WITH h AS (SELECT coalesce(max(position), 0) AS head FROM event_log),
			ev AS (
			    SELECT l.position, l.activity_id, l.sku_id, l.user_id,
			           e.aggregate_id, e.aggregate_version, e.event_type, e.schema_version, e.payload, e.occurred_at,
			           e.traceparent
			    FROM event_log l
			    JOIN order_events e ON e.id = l.event_id
			    WHERE l.position > $1
			      AND ($2::bigint = 0 OR l.activity_id = $2)
			      AND (cardinality($3::text[]) = 0 OR l.event_type = ANY($3::text[]))
			    ORDER BY l.position
			    LIMIT $4
			)
			SELECT h.head, ev.position, ev.activity_id, ev.sku_id, ev.user_id,
			       ev.aggregate_id, ev.aggregate_version, ev.event_type, ev.schema_version, ev.payload, ev.occurred_at,
			       ev.traceparent
			FROM h LEFT JOIN ev ON true
			ORDER BY ev.position`, after, f.ActivityID, types, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				pos, act, sku, user, version *int64
				agg, typ, traceparent        *string
				schema                       *int32
				payload                      []byte
				occurred                     *time.Time
			)
			if err := rows.Scan(&head, &pos, &act, &sku, &user, &agg, &version, &typ, &schema, &payload, &occurred, &traceparent); err != nil {
				return err
			}
			if pos == nil { // the log has no event after `after` matching f
				continue
			}
			e := order.Event{OrderID: *agg, Version: *version, Type: order.EventType(*typ),
				SchemaVersion: int(*schema), OccurredAt: occurred.UTC()}
			rec := ports.EventRecord{Position: *pos, ActivityID: *act, SKUID: *sku, UserID: *user, StoredSchemaVersion: e.SchemaVersion}
			if traceparent != nil { // NULL: none was recorded (or the event predates migration 00018)
				rec.Traceparent = *traceparent
			}
			p, err := order.DecodePayload(e.Type, e.SchemaVersion, payload)
			if err != nil {
				return fmt.Errorf("event at position %d (%s): %w", *pos, order.EventID(e.OrderID, e.Version), err)
			}
			// DecodePayload is the upcasting point: what it returns has
			// the current schema.
			e.Payload, e.SchemaVersion = p, order.CurrentSchemaVersion
			rec.Event = e
			out = append(out, rec)
		}
		return rows.Err()
	})
	if err != nil {
		if errors.Is(err, order.ErrCorruptStream) || errors.Is(err, ports.ErrTransient) {
			return nil, 0, fmt.Errorf("postgres: read events: %w", err)
		}
		return nil, 0, s.classify("read events", err)
	}
	return out, head, nil
}
