-- The sequenced event log (docs/architecture.md "The event log").
--
-- order_events.id is a bigserial: ids are taken before rows are visible,
-- so id order is not commit order, and a reader that went past id N+1
-- while N was still in flight would skip N forever. Positions are
-- therefore given by a sequencer that takes only events whose writing
-- transaction is settled, as the outbox relay does:
-- txid < pg_snapshot_xmin(pg_current_snapshot()), in (txid, id) order.
--
-- order_events.txid is the writing transaction's id. event_log holds the
-- final positions (and the ids of each event's order, for filters);
-- event_log_cursor, one row, is the (txid, id) of the last event
-- sequenced.
--
-- Backfill: the migration runs before the service (no writer is in
-- flight), so every existing event is settled. Adding the column stamps
-- every existing row with this migration's own transaction id X; new rows
-- are written by transactions that take their ids after X, so their txid
-- is > X. The existing rows get positions 1..n in id order, which is their
-- (X, id) order, and the cursor is set to (X, max(id)): the sequencer
-- continues after them with nothing skipped and nothing sequenced twice.
-- With no events the cursor is (X, 0).

-- +goose Up
ALTER TABLE order_events
    ADD COLUMN txid xid8 NOT NULL DEFAULT pg_current_xact_id();

CREATE INDEX order_events_sequencer ON order_events (txid, id);

CREATE TABLE event_log (
    position     bigint PRIMARY KEY CHECK (position > 0),
    event_id     bigint NOT NULL UNIQUE REFERENCES order_events (id),
    aggregate_id text   NOT NULL,
    activity_id  bigint NOT NULL,
    sku_id       bigint NOT NULL,
    user_id      bigint NOT NULL,
    event_type   text   NOT NULL
);

CREATE INDEX event_log_activity ON event_log (activity_id, position);

CREATE TABLE event_log_cursor (
    one  boolean PRIMARY KEY DEFAULT true CHECK (one),
    txid xid8    NOT NULL,
    id   bigint  NOT NULL
);

INSERT INTO event_log (position, event_id, aggregate_id, activity_id, sku_id, user_id, event_type)
SELECT row_number() OVER (ORDER BY e.id), e.id, e.aggregate_id, o.activity_id, o.sku_id, o.user_id, e.event_type
FROM order_events e
JOIN orders o ON o.order_id = e.aggregate_id
ORDER BY e.id;

-- Every event has its order row (written in the same transaction); one
-- without would be left out of the log while the cursor passes it.
-- +goose StatementBegin
DO $$
BEGIN
    IF (SELECT count(*) FROM event_log) <> (SELECT count(*) FROM order_events) THEN
        RAISE EXCEPTION 'event_log backfill: an order event has no orders row';
    END IF;
END
$$;
-- +goose StatementEnd

INSERT INTO event_log_cursor (txid, id)
SELECT pg_current_xact_id(), coalesce(max(id), 0) FROM order_events;

-- +goose Down
DROP TABLE event_log_cursor;
DROP TABLE event_log;
DROP INDEX order_events_sequencer;
ALTER TABLE order_events DROP COLUMN txid;
