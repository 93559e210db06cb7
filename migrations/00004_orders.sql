-- The orders projection, written in the same transaction as the events.
-- Its unique indexes enforce one order per reservation and at most one
-- non-canceled order per (activity, sku, user) (I2); a canceled order frees
-- the slot. No foreign keys: the insert path of a hot SKU must not share a
-- locked parent row.

-- +goose Up
CREATE TABLE orders (
    order_id          text        PRIMARY KEY,
    reservation_id    text        NOT NULL,
    activity_id       bigint      NOT NULL,
    sku_id            bigint      NOT NULL,
    user_id           bigint      NOT NULL,
    quantity          integer     NOT NULL CHECK (quantity > 0),
    status            text        NOT NULL CHECK (status IN ('CREATED', 'PAYING', 'PAID', 'CANCELED')),
    cancel_reason     text,
    payment_id        text,
    aggregate_version bigint      NOT NULL CHECK (aggregate_version > 0),
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL,
    expires_at        timestamptz NOT NULL,
    paid_at           timestamptz,
    canceled_at       timestamptz,
    CONSTRAINT orders_reservation_id_key UNIQUE (reservation_id),
    CHECK ((status = 'PAID') = (paid_at IS NOT NULL)),
    CHECK ((status = 'CANCELED') = (canceled_at IS NOT NULL))
);

CREATE UNIQUE INDEX orders_one_active_per_user
    ON orders (activity_id, sku_id, user_id)
    WHERE status <> 'CANCELED';

-- +goose Down
DROP TABLE orders;
