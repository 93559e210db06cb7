-- What operators change while a sale runs (issue 27, ports.ActivityOperations):
-- paused (PauseActivity / ResumeActivity), closed_at (CloseActivity, which
-- also moves ends_at to the close) and updated_at, the last change by an
-- operator (the creation for existing rows). PostgreSQL holds the truth of
-- these; Redis's copy (the entry's rules) is switched after each commit and
-- re-seeded from these columns by a rebuild.
--
-- A sale closed before it started ends before its start: the window check
-- of 00001 then holds only for sales that were not closed.
--
-- orders_by_user serves ListMyOrders: a buyer's orders newest first
-- (created_at, order_id descending) by keyset pages.

-- +goose Up
ALTER TABLE activities
    ADD COLUMN paused     boolean     NOT NULL DEFAULT false,
    ADD COLUMN closed_at  timestamptz,
    ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now(),
    DROP CONSTRAINT activities_check,
    ADD CONSTRAINT activities_window_check CHECK (ends_at > starts_at OR closed_at IS NOT NULL);

UPDATE activities SET updated_at = created_at;

CREATE INDEX orders_by_user ON orders (user_id, created_at DESC, order_id DESC);

-- +goose Down
DROP INDEX orders_by_user;

ALTER TABLE activities
    DROP CONSTRAINT activities_window_check,
    DROP COLUMN updated_at,
    DROP COLUMN closed_at,
    DROP COLUMN paused,
    ADD CONSTRAINT activities_check CHECK (ends_at > starts_at);
