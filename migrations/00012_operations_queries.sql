-- What the dead-letter store and the reconciler / auditor queries need
-- (adapters/postgres deadletters.go and audit.go).
--
-- dead_letters gains the fields a replay republishes (tag, keys, FIFO
-- message group); existing rows get the empty defaults. The constant
-- defaults make the ADD COLUMNs metadata-only (no table rewrite).
--
-- Indexes:
--   dead_letters_group_id      ListDeadLetters of one group, newest first
--                              (the primary key serves the unfiltered list);
--   dead_letters_open          DeadLetterStats: count and oldest of the OPEN
--                              rows, an index-only scan of the open ones;
--   orders_unpaid_expiry       ExpiredUnpaidOrders: unpaid orders by
--                              deadline, oldest first (only the few unpaid
--                              rows are indexed).
-- AuditStock counts non-canceled orders of a SKU through
-- orders_one_active_per_user (00004); every other lookup uses a primary key
-- or unique index that exists already.

-- +goose Up
ALTER TABLE dead_letters
    ADD COLUMN tag           text   NOT NULL DEFAULT '',
    ADD COLUMN keys          text[] NOT NULL DEFAULT '{}',
    ADD COLUMN message_group text   NOT NULL DEFAULT '';

CREATE INDEX dead_letters_group_id
    ON dead_letters (consumer_group, id DESC);

CREATE INDEX dead_letters_open
    ON dead_letters (first_seen_at)
    WHERE status = 'OPEN';

CREATE INDEX orders_unpaid_expiry
    ON orders (expires_at, order_id)
    WHERE status IN ('CREATED', 'PAYING');

-- +goose Down
DROP INDEX orders_unpaid_expiry;
DROP INDEX dead_letters_open;
DROP INDEX dead_letters_group_id;
ALTER TABLE dead_letters
    DROP COLUMN message_group,
    DROP COLUMN keys,
    DROP COLUMN tag;
