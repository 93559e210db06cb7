-- The order event store: one stream per order, versions 1, 2, 3, ...
-- UNIQUE(aggregate_id, aggregate_version) is the optimistic-concurrency
-- guard and the index for loading a stream and reading its head.

-- +goose Up
CREATE TABLE order_events (
    id                bigserial   PRIMARY KEY,
    aggregate_id      text        NOT NULL,
    aggregate_version bigint      NOT NULL CHECK (aggregate_version > 0),
    event_type        text        NOT NULL,
    schema_version    integer     NOT NULL CHECK (schema_version > 0),
    payload           jsonb       NOT NULL,
    occurred_at       timestamptz NOT NULL,
    recorded_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT order_events_stream_version_key UNIQUE (aggregate_id, aggregate_version)
);

-- +goose Down
DROP TABLE order_events;
