-- Reconciliation jobs (docs/contract.md §3.2, §3.3): the sweep compares every charge the
-- gateway created in a window with the attempts, both ways, and what it cannot settle by
-- the reconciler's own decision becomes a finding a person resolves. Findings are
-- deduplicated across runs by `dedupe_key` (class + attempt or reference + gateway ids), so
-- a sweep that sees the same discrepancy again only moves `last_seen_at`.
CREATE TABLE reconciliation_findings (
    id                   bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    class                text        NOT NULL CHECK (class IN ('charged_not_recorded', 'charged_twice',
                                         'recorded_not_charged', 'mismatch', 'unknown_reference')),
    dedupe_key           text        NOT NULL CONSTRAINT reconciliation_findings_dedupe UNIQUE,
    payment_attempt_id   uuid,
    -- The attempt id the gateway's record names (metadata / reference), as the gateway
    -- wrote it: for `unknown_reference` it names no attempt onecharge knows.
    reference            text,
    gateway_ids          text[]      NOT NULL DEFAULT '{}',
    attempt_status       text,
    attempt_amount_minor bigint,
    attempt_currency     text,
    gateway_amount_minor bigint,
    gateway_currency     text,
    detail               text        NOT NULL CHECK (length(detail) BETWEEN 1 AND 2000),
    -- `sweep` or `webhook`: what saw it first.
    source               text        NOT NULL CHECK (source IN ('sweep', 'webhook')),
    first_seen_at        timestamptz NOT NULL DEFAULT now(),
    last_seen_at         timestamptz NOT NULL DEFAULT now(),
    seen_count           integer     NOT NULL DEFAULT 1,
    state                text        NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'resolved')),
    resolved_at          timestamptz,
    resolved_by          text,
    resolution           text,
    CONSTRAINT reconciliation_findings_resolved_says_who_and_why CHECK (
        (state = 'open' AND resolved_at IS NULL AND resolved_by IS NULL AND resolution IS NULL)
        OR (state = 'resolved' AND resolved_at IS NOT NULL AND resolved_by IS NOT NULL
            AND length(resolution) BETWEEN 1 AND 1000))
);
-- `findings list [--open]`, `GET /api/findings?state=`: newest first within a state.
CREATE INDEX reconciliation_findings_state_idx ON reconciliation_findings (state, id DESC);
CREATE INDEX reconciliation_findings_attempt_idx ON reconciliation_findings (payment_attempt_id)
    WHERE payment_attempt_id IS NOT NULL;

-- One row per sweep: its window and what it did (the runbook and the metrics read it).
CREATE TABLE reconciliation_sweeps (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    window_from   timestamptz NOT NULL,
    window_to     timestamptz NOT NULL,
    actor         text        NOT NULL,
    started_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz,
    pages         integer     NOT NULL DEFAULT 0,
    records       bigint      NOT NULL DEFAULT 0,
    findings      integer     NOT NULL DEFAULT 0,
    settled       integer     NOT NULL DEFAULT 0,
    error         text
);

-- The gateway's records one sweep has read, a page at a time, so that the comparison is
-- SQL over a table instead of a set in memory: the sweep's memory stays one page whatever
-- the window. Rows live only while their sweep runs (deleted at its end; leftovers of a
-- crashed sweep are deleted by the next). UNLOGGED: a crash loses them, and the sweep is
-- simply run again.
CREATE UNLOGGED TABLE reconciliation_sweep_records (
    sweep_id           bigint NOT NULL,
    charge_id          text   NOT NULL,
    reference          text,
    -- `reference` when it is a UUID (an attempt id it may name), for the join.
    payment_attempt_id uuid,
    status             text   NOT NULL,
    amount_minor       bigint,
    currency           text,
    customer           text,
    idempotency_key    text,
    PRIMARY KEY (sweep_id, charge_id)
);
CREATE INDEX reconciliation_sweep_records_attempt_idx
    ON reconciliation_sweep_records (sweep_id, payment_attempt_id);

-- When the next scheduled sweep of `serve` is due: one row, claimed by the instance whose
-- UPDATE moves it on, so a fleet sweeps once per interval, not once per instance.
CREATE TABLE reconciliation_sweep_schedule (
    name     text        PRIMARY KEY,
    next_at  timestamptz NOT NULL
);

-- The sweep's page requests are evidence too (`list`), like lookups.
ALTER TABLE gateway_calls DROP CONSTRAINT gateway_calls_operation_check;
ALTER TABLE gateway_calls ADD CONSTRAINT gateway_calls_operation_check
    CHECK (operation IN ('charge', 'lookup', 'prepare', 'cancel', 'list'));
