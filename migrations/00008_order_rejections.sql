-- Terminal rejections of order-create messages (sold out in PostgreSQL,
-- second order of a user, reservation expired): one per order id and per
-- reservation. GetOrder shows them as REJECTED.

-- +goose Up
CREATE TABLE order_rejections (
    order_id       text        PRIMARY KEY,
    reservation_id text        NOT NULL,
    message_id     text        NOT NULL,
    activity_id    bigint      NOT NULL,
    sku_id         bigint      NOT NULL,
    user_id        bigint      NOT NULL,
    reason         text        NOT NULL,
    rejected_at    timestamptz NOT NULL,
    CONSTRAINT order_rejections_reservation_id_key UNIQUE (reservation_id)
);

-- +goose Down
DROP TABLE order_rejections;
