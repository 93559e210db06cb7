-- The price of an activity's unit (ports.Activity.UnitPrice, Currency):
-- minor units of an ISO 4217 currency, copied into every ORDER_CREATED
-- event (schema version 2, docs/events.md). 0 and '' mean not priced;
-- existing activities are not priced. A currency is present exactly when
-- the price is positive.

-- +goose Up
ALTER TABLE activities
    ADD COLUMN unit_price bigint NOT NULL DEFAULT 0 CHECK (unit_price >= 0),
    ADD COLUMN currency   text   NOT NULL DEFAULT '',
    ADD CONSTRAINT activities_currency_check
        CHECK ((unit_price = 0 AND currency = '') OR (unit_price > 0 AND currency ~ '^[A-Z]{3}$'));

-- +goose Down
ALTER TABLE activities DROP COLUMN currency, DROP COLUMN unit_price;
