-- The consumer inbox: one row per (consumer group, business message id),
-- written in the transaction of the message's effect (I3).

-- +goose Up
CREATE TABLE consumer_inbox (
    consumer_group   text        NOT NULL,
    message_id       text        NOT NULL,
    topic            text        NOT NULL,
    reservation_id   text,
    order_id         text,
    status           text        NOT NULL
        CHECK (status IN ('PROCESSING', 'SUCCEEDED', 'REJECTED', 'DUPLICATE', 'NOOP')),
    detail           text,
    delivery_attempt integer     NOT NULL CHECK (delivery_attempt >= 0),
    received_at      timestamptz NOT NULL DEFAULT now(),
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_group, message_id)
);

-- +goose Down
DROP TABLE consumer_inbox;
