-- The W3C trace context recorded with every order event
-- (ports.EventRecord.Traceparent, OrderEvent.traceparent in
-- docs/events.md): the traceparent of the request or message that caused
-- the event, NULL when none was recorded.
--
-- A nullable column without a default is a catalog change only: existing
-- rows are not rewritten and read as NULL (served as an empty
-- traceparent). The check is NOT VALID for the same reason (no scan of
-- the existing rows, which are all NULL); every new row is checked. The
-- writer stores only valid version-00 traceparents, so the check is a
-- guard, not the validation.

-- +goose Up
ALTER TABLE order_events
    ADD COLUMN traceparent text,
    ADD CONSTRAINT order_events_traceparent_check
        CHECK (traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$') NOT VALID;

-- +goose Down
ALTER TABLE order_events DROP COLUMN traceparent;
