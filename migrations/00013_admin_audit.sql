-- One audit trail for every operator and system action (adapters/postgres
-- audit.go): who (actor: "user:<id>" of a verified admin token, or
-- "system:..."), what (action), on what (target), with which parameters
-- (params) and result (outcome), when (at, the transaction's time). Rows
-- are written in the transaction of the action they record.
--
-- It replaces dead_letter_audit: its rows move here as DLQ_REPLAY actions
-- on target 'dead_letter:<id>' with params {reason, replay_id} (replay_id
-- only when it was set), keeping their time and order. Down recreates
-- dead_letter_audit and moves the DLQ_REPLAY rows of existing dead letters
-- back (rows of unknown dead letters, which the old table could not hold,
-- are dropped with admin_audit).
--
-- Indexes: admin_audit_at serves "what happened between t1 and t2";
-- admin_audit_actor_at serves "what did this operator do", newest first.

-- +goose Up
CREATE TABLE admin_audit (
    id      bigserial   PRIMARY KEY,
    actor   text        NOT NULL,
    action  text        NOT NULL,
    target  text        NOT NULL DEFAULT '',
    params  jsonb       NOT NULL DEFAULT '{}',
    outcome text        NOT NULL,
    at      timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX admin_audit_at ON admin_audit (at);
CREATE INDEX admin_audit_actor_at ON admin_audit (actor, at);

INSERT INTO admin_audit (actor, action, target, params, outcome, at)
SELECT actor,
       'DLQ_REPLAY',
       'dead_letter:' || dead_letter_id,
       jsonb_strip_nulls(jsonb_build_object('reason', reason, 'replay_id', replay_id)),
       outcome,
       created_at
FROM dead_letter_audit
ORDER BY id;

DROP TABLE dead_letter_audit;

-- +goose Down
CREATE TABLE dead_letter_audit (
    id             bigserial   PRIMARY KEY,
    dead_letter_id bigint      NOT NULL REFERENCES dead_letters (id),
    actor          text        NOT NULL,
    action         text        NOT NULL,
    reason         text        NOT NULL DEFAULT '',
    replay_id      text,
    outcome        text        NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now()
);

INSERT INTO dead_letter_audit (dead_letter_id, actor, action, reason, replay_id, outcome, created_at)
SELECT d.id,
       a.actor,
       'REPLAY',
       btrim(coalesce(a.params ->> 'reason', '') || ' ' || coalesce(a.params ->> 'detail', '')),
       a.params ->> 'replay_id',
       a.outcome,
       a.at
FROM admin_audit a
JOIN dead_letters d ON a.target = 'dead_letter:' || d.id
WHERE a.action = 'DLQ_REPLAY'
ORDER BY a.id;

DROP TABLE admin_audit;
