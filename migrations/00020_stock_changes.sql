-- Stock changes of a running sale (ports.StockOperations: AddStock and
-- RemoveStock), one row per operator request id, so that a change applies
-- exactly once to the Redis books and to PostgreSQL's however often it is
-- retried (docs/architecture.md "Stock changes").
--
-- A row is inserted PENDING (delta > 0 adds, < 0 removes), then, in one
-- transaction that holds the row's lock while the Redis step runs,
-- becomes APPLIED (activities.stock and sku_stock moved by delta,
-- stock_before/stock_after the initial stock around it, available the
-- Redis unreserved stock after it) or REFUSED (a removal of more units
-- than were unreserved: available is how many could be removed). Nothing
-- changes once a row is APPLIED or REFUSED. The partial index serves the
-- recovery worker (PENDING rows, oldest first) and the per-SKU look-ups
-- of the stock recovery and the reconciler.

-- +goose Up
CREATE TABLE stock_changes (
    request_id   text        PRIMARY KEY CHECK (request_id <> ''),
    activity_id  bigint      NOT NULL,
    sku_id       bigint      NOT NULL,
    delta        bigint      NOT NULL CHECK (delta <> 0),
    status       text        NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'APPLIED', 'REFUSED')),
    actor        text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    applied_at   timestamptz,
    stock_before bigint,
    stock_after  bigint,
    available    bigint,
    FOREIGN KEY (activity_id, sku_id) REFERENCES activities (activity_id, sku_id),
    CHECK ((status = 'PENDING') = (applied_at IS NULL))
);

CREATE INDEX stock_changes_pending ON stock_changes (activity_id, sku_id, created_at)
    WHERE status = 'PENDING';

-- +goose Down
DROP TABLE stock_changes;
