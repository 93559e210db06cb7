-- Activities: one flash sale of one SKU with its stock and time rules.
-- Durations are intervals (microsecond precision). stock_buckets is the
-- number of sku_stock rows the final stock is spread over (see 00002).

-- +goose Up
CREATE TABLE activities (
    activity_id     bigint      NOT NULL CHECK (activity_id > 0),
    sku_id          bigint      NOT NULL CHECK (sku_id > 0),
    stock           bigint      NOT NULL CHECK (stock >= 0),
    starts_at       timestamptz NOT NULL,
    ends_at         timestamptz NOT NULL,
    payment_timeout interval    NOT NULL CHECK (payment_timeout > interval '0'),
    reservation_ttl interval    NOT NULL CHECK (reservation_ttl > interval '0'),
    stock_buckets   integer     NOT NULL DEFAULT 1 CHECK (stock_buckets BETWEEN 1 AND 64),
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (activity_id, sku_id),
    CHECK (ends_at > starts_at)
);

-- +goose Down
DROP TABLE activities;
