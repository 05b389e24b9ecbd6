-- Every manual action an operator takes — resolve (as succeeded, declined or retry), a
-- recheck at the gateway, a dead-letter replay, a bulk action — leaves one row here: who
-- (actor), through what (via: cli, api, console), what (action), on which attempts (or which
-- dead letter), why (reason) and what came of it (outcome, detail). A database write is
-- audited in the same transaction as the write, so an action without its row, or a row
-- without its action, cannot exist. Rows are only ever inserted.
CREATE TABLE operator_audit (
    id                  bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at                  timestamptz NOT NULL DEFAULT now(),
    actor               text        NOT NULL CHECK (length(actor) BETWEEN 1 AND 255),
    via                 text        NOT NULL CHECK (via IN ('cli', 'api', 'console')),
    action              text        NOT NULL CHECK (length(action) BETWEEN 1 AND 64),
    payment_attempt_ids uuid[]      NOT NULL DEFAULT '{}',
    dlq_sequence        bigint,
    reason              text,
    outcome             text        NOT NULL CHECK (length(outcome) BETWEEN 1 AND 64),
    detail              jsonb       NOT NULL DEFAULT '{}'
);
-- `audit list`, newest first, paged by id; by actor; by attempt (GIN on the id array).
CREATE INDEX operator_audit_actor_idx ON operator_audit (actor, id DESC);
CREATE INDEX operator_audit_attempts_idx ON operator_audit USING gin (payment_attempt_ids);

-- Cursor paging over every attempt (`attempts list --before`, `GET /api/attempts?before=`)
-- and the time filters (created_after/created_before) walk this index, newest first; the
-- attempt id breaks ties between equal timestamps so a page boundary never skips or
-- repeats an attempt. (A search by idempotency key uses its unique constraint's index.)
CREATE INDEX payment_attempts_created_idx ON payment_attempts (created_at DESC, payment_attempt_id DESC);
