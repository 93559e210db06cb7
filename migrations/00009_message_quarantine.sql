-- Poison messages isolated by a consumer group (undecodable, unsupported
-- schema, invalid fields), kept with their raw body for diagnosis. One row
-- per (group, broker message id): a redelivery does not add another.
-- message_id is NULL when the body could not be decoded.

-- +goose Up
CREATE TABLE message_quarantine (
    id                bigserial   PRIMARY KEY,
    consumer_group    text        NOT NULL,
    topic             text        NOT NULL,
    message_id        text,
    broker_message_id text        NOT NULL,
    error_class       text        NOT NULL,
    reason            text        NOT NULL,
    body              bytea       NOT NULL,
    properties        jsonb       NOT NULL DEFAULT '{}',
    delivery_attempt  integer     NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT message_quarantine_group_broker_message_key UNIQUE (consumer_group, broker_message_id)
);

-- +goose Down
DROP TABLE message_quarantine;
