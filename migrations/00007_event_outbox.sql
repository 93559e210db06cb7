-- The transactional outbox. txid is the writing transaction's id: the relay
-- only claims rows whose transaction is older than every transaction still
-- in flight (txid < pg_snapshot_xmin(pg_current_snapshot())), so a row
-- committed late by an old transaction is never skipped.
--
-- Indexes: the relay's scan of unpublished rows in (txid, id) order; the
-- per-FIFO-group check "no earlier unpublished row of the same group";
-- pruning of published rows.

-- +goose Up
CREATE TABLE event_outbox (
    id            bigserial   PRIMARY KEY,
    txid          xid8        NOT NULL DEFAULT pg_current_xact_id(),
    topic         text        NOT NULL,
    message_id    text        NOT NULL,
    tag           text        NOT NULL DEFAULT '',
    keys          text[]      NOT NULL DEFAULT '{}',
    message_group text,
    deliver_at    timestamptz,
    body          bytea       NOT NULL,
    properties    jsonb       NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL DEFAULT now(),
    available_at  timestamptz NOT NULL DEFAULT now(),
    attempts      integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error    text,
    published_at  timestamptz,
    CHECK (message_group IS NULL OR deliver_at IS NULL)
);

CREATE INDEX event_outbox_relay
    ON event_outbox (txid, id)
    WHERE published_at IS NULL;

CREATE INDEX event_outbox_group_relay
    ON event_outbox (message_group, txid, id)
    WHERE published_at IS NULL AND message_group IS NOT NULL;

CREATE INDEX event_outbox_prune
    ON event_outbox (published_at)
    WHERE published_at IS NOT NULL;

-- +goose Down
DROP TABLE event_outbox;
