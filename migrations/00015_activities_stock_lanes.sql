-- The number of Redis slots an activity's entry stock is split over
-- (ports.Activity.StockLanes; docs/capacity.md "The hot SKU"). PostgreSQL
-- keeps it so that Redis books rebuilt after a Redis restart use the same
-- split the activity was created with. Existing activities have one lane.

-- +goose Up
ALTER TABLE activities
    ADD COLUMN stock_lanes integer NOT NULL DEFAULT 1 CHECK (stock_lanes BETWEEN 1 AND 16);

-- +goose Down
ALTER TABLE activities DROP COLUMN stock_lanes;
