-- The decided fate of every reservation, whatever message id carried it:
-- an order and a rejection of one reservation exclude each other. A row is
-- claimed as PROCESSING in the deciding transaction and finished as ORDERED
-- or REJECTED in the same transaction.

-- +goose Up
CREATE TABLE reservation_outcomes (
    reservation_id text        PRIMARY KEY,
    order_id       text        NOT NULL,
    message_id     text        NOT NULL,
    status         text        NOT NULL CHECK (status IN ('PROCESSING', 'ORDERED', 'REJECTED')),
    reason         text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE reservation_outcomes;
