-- The inventory ledger: every movement of the PostgreSQL final stock, at
-- most one per (reservation, reason) so a doubled effect fails loudly.
-- message_id is NULL for movements not caused by a message (buyer cancel).

-- +goose Up
CREATE TABLE inventory_ledger (
    id             bigserial   PRIMARY KEY,
    activity_id    bigint      NOT NULL,
    sku_id         bigint      NOT NULL,
    delta          bigint      NOT NULL CHECK (delta <> 0),
    reason         text        NOT NULL,
    order_id       text        NOT NULL,
    reservation_id text        NOT NULL,
    message_id     text,
    created_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT inventory_ledger_reservation_reason_key UNIQUE (reservation_id, reason)
);

-- +goose Down
DROP TABLE inventory_ledger;
