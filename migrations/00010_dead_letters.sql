-- Dead letters copied from %DLQ%<group> and the audit trail of operator
-- actions on them (replay, resolve). Their store adds the indexes its
-- queries need.

-- +goose Up
CREATE TABLE dead_letters (
    id                bigserial   PRIMARY KEY,
    consumer_group    text        NOT NULL,
    topic             text        NOT NULL,
    message_id        text        NOT NULL,
    broker_message_id text        NOT NULL,
    error_class       text        NOT NULL,
    last_error        text        NOT NULL DEFAULT '',
    attempts          integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    first_seen_at     timestamptz NOT NULL DEFAULT now(),
    last_seen_at      timestamptz NOT NULL DEFAULT now(),
    replay_count      integer     NOT NULL DEFAULT 0 CHECK (replay_count >= 0),
    status            text        NOT NULL DEFAULT 'OPEN' CHECK (status IN ('OPEN', 'REPLAYED', 'RESOLVED')),
    body              bytea       NOT NULL,
    properties        jsonb       NOT NULL DEFAULT '{}',
    CONSTRAINT dead_letters_group_message_key UNIQUE (consumer_group, message_id)
);

CREATE TABLE dead_letter_audit (
    id             bigserial   PRIMARY KEY,
    dead_letter_id bigint      NOT NULL REFERENCES dead_letters (id),
    actor          text        NOT NULL,
    action         text        NOT NULL,
    reason         text        NOT NULL DEFAULT '',
    replay_id      text,
    outcome        text        NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE dead_letter_audit;
DROP TABLE dead_letters;
