-- Why: attempt_transitions, gateway_calls and the outbox grew forever. They become
-- partitioned by month (UTC) on their time column so that history past
-- `purge.history_retention` goes as whole partitions (detach + drop, no row-by-row DELETE,
-- no bloat). The retention job (src/operator/retention.rs) creates months ahead, keeps the
-- rows of attempts that are not final (and unpublished events) by copying them into the
-- DEFAULT partition before it drops a month, and empties what lands in DEFAULT.
-- payment_attempts and processed_messages are not partitioned: the first is the dedupe
-- evidence and the ledger of truth and is kept; the second has its own purge.
--
-- A primary key of a partitioned table must contain the partition key, so the keys become
-- (id, at), (id, started_at) and (event_id, created_at); ids still come from one sequence
-- (event ids are random UUIDs), so they stay unique. A unique index can no longer say "one
-- event per final state of an attempt" across partitions: that rule moves to the small
-- table outbox_final_states, kept as long as payment_attempts, filled by a trigger on every
-- insert into the outbox; its key keeps the old index's name, so a second event still fails
-- with 23505 on `outbox_one_event_per_final_state`.
--
-- Existing rows are copied in this migration's transaction (one month partition from the
-- oldest row's month through two months ahead, plus DEFAULT).

CREATE FUNCTION pg_temp.create_months(parent text, key text, source text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    first_month timestamptz;
    month timestamptz;
BEGIN
    EXECUTE format('SELECT date_trunc(''month'', least(min(%I), now()), ''UTC'') FROM %I', key, source)
        INTO first_month;
    month := first_month;
    WHILE month <= date_trunc('month', now(), 'UTC') + interval '2 months' LOOP
        EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
            parent || '_p' || to_char(month AT TIME ZONE 'UTC', 'YYYYMM'), parent,
            month, (month AT TIME ZONE 'UTC' + interval '1 month') AT TIME ZONE 'UTC');
        month := (month AT TIME ZONE 'UTC' + interval '1 month') AT TIME ZONE 'UTC';
    END LOOP;
    EXECUTE format('CREATE TABLE %I PARTITION OF %I DEFAULT', parent || '_default', parent);
END $$;

-- attempt_transitions, by `at`
ALTER TABLE attempt_transitions RENAME TO attempt_transitions_unpartitioned;
CREATE TABLE attempt_transitions (
    id                 bigint      NOT NULL DEFAULT nextval('attempt_transitions_id_seq'),
    payment_attempt_id uuid        NOT NULL CONSTRAINT attempt_transitions_payment_attempt_id_fkey
                                   REFERENCES payment_attempts ON DELETE RESTRICT,
    from_status        text,
    to_status          text        NOT NULL,
    cause              text        NOT NULL,
    actor              text        NOT NULL,
    detail             text        CONSTRAINT attempt_transitions_detail_check
                                   CHECK (length(detail) <= 2048),
    at                 timestamptz NOT NULL DEFAULT now()
) PARTITION BY RANGE (at);
ALTER SEQUENCE attempt_transitions_id_seq OWNED BY attempt_transitions.id;
SELECT pg_temp.create_months('attempt_transitions', 'at', 'attempt_transitions_unpartitioned');
INSERT INTO attempt_transitions (id, payment_attempt_id, from_status, to_status, cause, actor, detail, at)
    SELECT id, payment_attempt_id, from_status, to_status, cause, actor, detail, at
    FROM attempt_transitions_unpartitioned;
DROP TABLE attempt_transitions_unpartitioned;
ALTER TABLE attempt_transitions ADD CONSTRAINT attempt_transitions_pkey PRIMARY KEY (id, at);
CREATE INDEX attempt_transitions_attempt_idx ON attempt_transitions (payment_attempt_id, id);

-- gateway_calls, by `started_at`
ALTER TABLE gateway_calls RENAME TO gateway_calls_unpartitioned;
CREATE TABLE gateway_calls (
    id                 bigint      NOT NULL DEFAULT nextval('gateway_calls_id_seq'),
    payment_attempt_id uuid        NOT NULL CONSTRAINT gateway_calls_payment_attempt_id_fkey
                                   REFERENCES payment_attempts ON DELETE RESTRICT,
    operation          text        NOT NULL,
    idempotency_key    text        NOT NULL,
    try_number         integer     NOT NULL CONSTRAINT gateway_calls_try_number_check
                                   CHECK (try_number >= 0),
    lease_token        bigint,
    started_at         timestamptz NOT NULL,
    finished_at        timestamptz NOT NULL,
    http_status        integer,
    outcome            text        NOT NULL,
    gateway_charge_id  text,
    error              text        CONSTRAINT gateway_calls_error_check
                                   CHECK (length(error) <= 1024),
    CONSTRAINT gateway_calls_operation_check CHECK (operation IN ('charge', 'lookup', 'prepare'))
) PARTITION BY RANGE (started_at);
ALTER SEQUENCE gateway_calls_id_seq OWNED BY gateway_calls.id;
SELECT pg_temp.create_months('gateway_calls', 'started_at', 'gateway_calls_unpartitioned');
INSERT INTO gateway_calls (id, payment_attempt_id, operation, idempotency_key, try_number,
        lease_token, started_at, finished_at, http_status, outcome, gateway_charge_id, error)
    SELECT id, payment_attempt_id, operation, idempotency_key, try_number, lease_token,
           started_at, finished_at, http_status, outcome, gateway_charge_id, error
    FROM gateway_calls_unpartitioned;
DROP TABLE gateway_calls_unpartitioned;
ALTER TABLE gateway_calls ADD CONSTRAINT gateway_calls_pkey PRIMARY KEY (id, started_at);
CREATE INDEX gateway_calls_attempt_idx ON gateway_calls (payment_attempt_id, id);

-- outbox, by `created_at`
ALTER TABLE outbox RENAME TO outbox_unpartitioned;
CREATE TABLE outbox (
    event_id           uuid        NOT NULL,
    payment_attempt_id uuid        NOT NULL CONSTRAINT outbox_payment_attempt_id_fkey
                                   REFERENCES payment_attempts ON DELETE RESTRICT,
    status             text        NOT NULL CONSTRAINT outbox_status_check
        CHECK (status IN ('succeeded', 'declined', 'expired', 'needs_review')),
    subject            text        NOT NULL,
    headers            jsonb       NOT NULL,
    payload            jsonb       NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    published_at       timestamptz,
    publish_attempts   integer     NOT NULL DEFAULT 0,
    last_error         text,
    next_attempt_at    timestamptz
) PARTITION BY RANGE (created_at);
SELECT pg_temp.create_months('outbox', 'created_at', 'outbox_unpartitioned');
INSERT INTO outbox (event_id, payment_attempt_id, status, subject, headers, payload, created_at,
        published_at, publish_attempts, last_error, next_attempt_at)
    SELECT event_id, payment_attempt_id, status, subject, headers, payload, created_at,
           published_at, publish_attempts, last_error, next_attempt_at
    FROM outbox_unpartitioned;
CREATE TABLE outbox_final_states (
    payment_attempt_id uuid NOT NULL,
    status             text NOT NULL CHECK (status IN ('succeeded', 'declined', 'expired')),
    event_id           uuid NOT NULL
);
INSERT INTO outbox_final_states (payment_attempt_id, status, event_id)
    SELECT payment_attempt_id, status, event_id FROM outbox_unpartitioned
    WHERE status IN ('succeeded', 'declined', 'expired');
DROP TABLE outbox_unpartitioned;
ALTER TABLE outbox ADD CONSTRAINT outbox_pkey PRIMARY KEY (event_id, created_at);
ALTER TABLE outbox_final_states
    ADD CONSTRAINT outbox_one_event_per_final_state PRIMARY KEY (payment_attempt_id, status);
CREATE INDEX outbox_unpublished_idx ON outbox (created_at) WHERE published_at IS NULL;
-- `attempts show` reads an attempt's events (before, a scan: the unique index was partial)
CREATE INDEX outbox_attempt_idx ON outbox (payment_attempt_id);

-- Records a final state's event, so that a second, different event for it fails (23505 on
-- outbox_one_event_per_final_state). The same event written again — the retention job
-- copying a kept row out of a month it drops — is the same event and passes.
CREATE FUNCTION outbox_record_final_state() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM outbox_final_states
    WHERE payment_attempt_id = NEW.payment_attempt_id AND status = NEW.status
      AND event_id = NEW.event_id;
    IF NOT FOUND THEN
        INSERT INTO outbox_final_states (payment_attempt_id, status, event_id)
        VALUES (NEW.payment_attempt_id, NEW.status, NEW.event_id);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER outbox_one_event_per_final_state BEFORE INSERT ON outbox
    FOR EACH ROW WHEN (NEW.status IN ('succeeded', 'declined', 'expired'))
    EXECUTE FUNCTION outbox_record_final_state();
