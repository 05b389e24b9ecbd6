-- onecharge's schema for its first release, as one migration.
--
-- Until the first release the schema grew in 47 migrations, each written to apply online to
-- a running installation. Nothing was released, so no installation holds that history: they
-- are replaced by this one file, which makes the schema they made (tests/it/migrations.rs
-- compares the catalogue with tests/it/migrations/baseline.catalog, the description of what
-- the 47 made but for one difference: `outbox_attempt_unless_finding`, added NOT VALID
-- online, is validated here; decision 260). What the old files said is in git and in the
-- decision records this file links.
--
-- This migration runs once, on an empty database, inside one transaction: the online rules
-- every later migration follows (docs/operations.md §27, decision 261: `-- no-transaction`
-- and CREATE INDEX CONCURRENTLY for an index of an existing table, a lock_timeout before
-- any lock, NOT VALID then VALIDATE for a constraint) guard tables that hold rows and
-- writers; none exists yet, so none of them applies here. tests/migration_rules.rs checks
-- them on every migration after this one.
--
-- Grouped by what each table holds, in the order a charge meets them: the commands received,
-- the attempts, their history, what operators search and count, the outbox, refunds, the
-- gateway's side (webhooks, rate limit), reconciliation, the operators' own tables, and last
-- the history's months, made by the same functions that make every later month. Names of
-- constraints and indexes are the ones the code and the tests match on (a SQLSTATE 23505 on
-- `outbox_one_event_per_final_state`, the plans that name an index).

------------------------------------------------------------------------------------------
-- Commands received: the dedupe record and the stream audit
------------------------------------------------------------------------------------------

-- One row per command message a consumer handled, keyed by (consumer, message id): the
-- dedupe evidence, written in the same transaction as the attempt it made (decisions 002, 004).
-- `purge` deletes rows past the dedupe window by `recorded_at`, in its order: a B-tree, not
-- a BRIN (decision 202).
CREATE TABLE processed_messages (
    consumer           text NOT NULL,
    message_id         text NOT NULL,
    body_sha256        bytea NOT NULL,
    payment_attempt_id uuid NOT NULL,
    result             text NOT NULL,
    stream_sequence    bigint NOT NULL,
    recorded_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT processed_messages_pkey PRIMARY KEY (consumer, message_id),
    CONSTRAINT processed_messages_body_sha256_check CHECK (length(body_sha256) = 32),
    CONSTRAINT processed_messages_consumer_check CHECK (length(consumer) BETWEEN 1 AND 200),
    CONSTRAINT processed_messages_message_id_check CHECK (length(message_id) BETWEEN 1 AND 200),
    CONSTRAINT processed_messages_result_check CHECK (result IN ('accepted', 'business_duplicate', 'stale', 'refund_accepted', 'refund_duplicate')),
    CONSTRAINT processed_messages_stream_sequence_check CHECK (stream_sequence >= 0)
);
CREATE INDEX processed_messages_recorded_at_idx ON processed_messages (recorded_at);

-- The stream audit (decision 106): how far each consumer's stream was checked against
-- processed_messages, and the messages found that intake never recorded nor dead-lettered,
-- open until replayed or resolved.
CREATE TABLE stream_audit_watermarks (
    consumer        text NOT NULL,
    checked_through bigint NOT NULL DEFAULT 0,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT stream_audit_watermarks_pkey PRIMARY KEY (consumer),
    CONSTRAINT stream_audit_watermarks_checked_through_check CHECK (checked_through >= 0),
    CONSTRAINT stream_audit_watermarks_consumer_check CHECK (length(consumer) BETWEEN 1 AND 200)
);
CREATE TABLE intake_unrecorded_messages (
    consumer           text NOT NULL,
    stream_sequence    bigint NOT NULL,
    message_id         text,
    payment_attempt_id uuid,
    stored_at          timestamptz NOT NULL,
    found_at           timestamptz NOT NULL DEFAULT now(),
    replayed_at        timestamptz,
    replayed_by        text,
    resolved_at        timestamptz,
    CONSTRAINT intake_unrecorded_messages_pkey PRIMARY KEY (consumer, stream_sequence),
    CONSTRAINT intake_unrecorded_messages_consumer_check CHECK (length(consumer) BETWEEN 1 AND 200),
    CONSTRAINT intake_unrecorded_messages_message_id_check CHECK (length(message_id) BETWEEN 1 AND 200),
    CONSTRAINT intake_unrecorded_messages_replayed_by_check CHECK (length(replayed_by) BETWEEN 1 AND 255),
    CONSTRAINT intake_unrecorded_messages_stream_sequence_check CHECK (stream_sequence > 0)
);
CREATE INDEX intake_unrecorded_messages_open_idx ON intake_unrecorded_messages (consumer, stream_sequence) WHERE resolved_at IS NULL;

------------------------------------------------------------------------------------------
-- Payment attempts
------------------------------------------------------------------------------------------

-- One row per attempt, the ledger of truth: kept as long as the deployment, never
-- partitioned. Its pages are filled to 70 % so that the claim's and the settlement's new
-- row versions stay on their page (HOT, no index entry; decision 203). The idempotency key
-- is derived from the attempt id, so it needs no index of its own (decisions 100, 122);
-- Stripe's derived keys count by `create_key_seq` and `confirm_key_seq` (decision 096) and
-- the PaymentIntent id is stored before the call that can charge (`gateway_object_id`,
-- decision 045). An accepted attempt's row records its creation (`accepted_by`,
-- `first_stream_sequence`; decision 219) and an open claim (`claim_*`; decision 220).
CREATE TABLE payment_attempts (
    payment_attempt_id    uuid NOT NULL,
    order_id              text NOT NULL,
    customer_id           text NOT NULL,
    amount_minor          bigint NOT NULL,
    currency              text NOT NULL,
    payment_method        text NOT NULL,
    description           text,
    requested_at          timestamptz,
    fingerprint           bytea NOT NULL,
    idempotency_key       text NOT NULL,
    status                text NOT NULL,
    tries                 integer NOT NULL DEFAULT 0,
    next_run_at           timestamptz NOT NULL DEFAULT now(),
    lease_owner           text,
    lease_token           bigint NOT NULL DEFAULT 0,
    lease_expires_at      timestamptz,
    dispatched_at         timestamptz,
    first_dispatched_at   timestamptz,
    reconcile_checks      integer NOT NULL DEFAULT 0,
    gateway_charge_id     text,
    decline_code          text,
    last_error            text,
    review_reason         text,
    first_message_id      text NOT NULL,
    correlation_id        text,
    traceparent           text,
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    gateway_object_id     text,
    create_key_seq        integer NOT NULL DEFAULT 1,
    confirm_key_seq       integer NOT NULL DEFAULT 1,
    accepted_by           text,
    first_stream_sequence bigint,
    claim_id              bigint,
    claim_at              timestamptz,
    claim_hand_over       boolean,
    CONSTRAINT payment_attempts_pkey PRIMARY KEY (payment_attempt_id),
    CONSTRAINT payment_attempts_amount_minor_check CHECK ((amount_minor > 0) AND (amount_minor <= 1000000000000)),
    CONSTRAINT payment_attempts_confirm_key_seq_check CHECK (confirm_key_seq >= 1),
    CONSTRAINT payment_attempts_create_key_seq_check CHECK (create_key_seq >= 1),
    CONSTRAINT payment_attempts_currency_check CHECK (currency ~ '^[A-Z]{3}$'),
    CONSTRAINT payment_attempts_customer_id_check CHECK (length(customer_id) BETWEEN 1 AND 128),
    CONSTRAINT payment_attempts_description_check CHECK (length(description) <= 500),
    CONSTRAINT payment_attempts_fingerprint_check CHECK (length(fingerprint) = 32),
    CONSTRAINT payment_attempts_gateway_object_id_check CHECK (length(gateway_object_id) BETWEEN 1 AND 255),
    CONSTRAINT payment_attempts_idempotency_key_check CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    CONSTRAINT payment_attempts_idempotency_key_derived CHECK (idempotency_key = ('onecharge-' || (payment_attempt_id)::text)),
    CONSTRAINT payment_attempts_last_error_check CHECK (length(last_error) <= 1024),
    CONSTRAINT payment_attempts_lease_only_in_flight CHECK ((status = 'in_flight') = (lease_expires_at IS NOT NULL)),
    CONSTRAINT payment_attempts_lease_token_check CHECK (lease_token >= 0),
    CONSTRAINT payment_attempts_order_id_check CHECK (length(order_id) BETWEEN 1 AND 128),
    CONSTRAINT payment_attempts_payment_method_check CHECK (length(payment_method) BETWEEN 1 AND 255),
    CONSTRAINT payment_attempts_reconcile_checks_check CHECK (reconcile_checks >= 0),
    CONSTRAINT payment_attempts_review_has_reason CHECK ((status <> 'needs_review') OR (review_reason IS NOT NULL)),
    CONSTRAINT payment_attempts_review_reason_check CHECK (length(review_reason) <= 1024),
    CONSTRAINT payment_attempts_status_check CHECK (status IN ('pending', 'in_flight', 'succeeded', 'declined', 'unknown', 'needs_review', 'expired')),
    CONSTRAINT payment_attempts_succeeded_has_charge CHECK ((status <> 'succeeded') OR (gateway_charge_id IS NOT NULL)),
    CONSTRAINT payment_attempts_tries_check CHECK (tries >= 0)
) WITH (fillfactor = 70);
COMMENT ON COLUMN payment_attempts.accepted_by IS
    'The intake that accepted the command (its actor), when this row is the record of the attempt''s creation: then it has no transition row of its own (decision 219)';
COMMENT ON COLUMN payment_attempts.first_stream_sequence IS
    'The stream sequence of first_message_id, the message the attempt was created from';
COMMENT ON COLUMN payment_attempts.claim_id IS
    'The history id of the claim that put the attempt in flight, taken from attempt_transitions_id_seq when the claim was made; NULL once the claim is written to the history (decision 220)';
COMMENT ON COLUMN payment_attempts.claim_at IS
    'When the open claim was made (the database''s clock); NULL with claim_id';
COMMENT ON COLUMN payment_attempts.claim_hand_over IS
    'Whether the open claim is a hand-over (past the retry window: nothing is sent); NULL with claim_id';

-- Each state an attempt waits in has an index of its own, partial, so a charge's claim and
-- settlement write no entry in them (decisions 173, 215): pending and unknown by when they
-- are due, in_flight by its lease, needs_review and expired by age. Settled outcomes are
-- found through attempt_search. The gateway's ids are looked up by webhooks and the sweep.
CREATE INDEX payment_attempts_pending_due_idx ON payment_attempts (next_run_at) WHERE status = 'pending';
CREATE INDEX payment_attempts_unknown_due_idx ON payment_attempts (next_run_at) WHERE status = 'unknown';
CREATE INDEX payment_attempts_in_flight_lease_idx ON payment_attempts (lease_expires_at) WHERE status = 'in_flight';
CREATE INDEX payment_attempts_review_expired_created_idx ON payment_attempts (status, created_at DESC) WHERE status IN ('needs_review', 'expired');
CREATE INDEX payment_attempts_gateway_charge_idx ON payment_attempts (gateway_charge_id) WHERE gateway_charge_id IS NOT NULL;
CREATE INDEX payment_attempts_gateway_object_idx ON payment_attempts (gateway_object_id) WHERE gateway_object_id IS NOT NULL;

------------------------------------------------------------------------------------------
-- An attempt's history: transitions and gateway calls
------------------------------------------------------------------------------------------

-- attempt_transitions and gateway_calls only grow, so they are partitioned by calendar
-- month (UTC) and old months go whole, detached and dropped by retention (decisions 085,
-- 101). They have no primary key: every reader finds rows by attempt (`…_attempt_idx`), by
-- time (the BRIN indexes the overview's charts read, decision 098) or a month at a time
-- (decision 170); the ids still come from one sequence each and order an attempt's
-- timeline. No foreign key to payment_attempts either: a month is dropped without a lock on
-- it. A transition also carries the claim of the flight it ended (`claim_*`, decision 220)
-- and the gateway call that caused it (`call_*`, decision 221), so a charge that goes
-- straight through writes one history row.
CREATE SEQUENCE attempt_transitions_id_seq;
CREATE TABLE attempt_transitions (
    id                     bigint NOT NULL DEFAULT nextval('attempt_transitions_id_seq'),
    payment_attempt_id     uuid NOT NULL,
    from_status            text,
    to_status              text NOT NULL,
    cause                  text NOT NULL,
    actor                  text NOT NULL,
    detail                 text,
    at                     timestamptz NOT NULL DEFAULT now(),
    claim_id               bigint,
    claim_at               timestamptz,
    claim_cause            text,
    claim_actor            text,
    claim_detail           text,
    call_id                bigint,
    call_operation         text,
    call_idempotency_key   text,
    call_try_number        integer,
    call_lease_token       bigint,
    call_started_at        timestamptz,
    call_finished_at       timestamptz,
    call_http_status       integer,
    call_outcome           text,
    call_gateway_charge_id text,
    call_error             text,
    CONSTRAINT attempt_transitions_detail_check CHECK (length(detail) <= 2048)
) PARTITION BY RANGE (at);
ALTER SEQUENCE attempt_transitions_id_seq OWNED BY attempt_transitions.id;
COMMENT ON COLUMN attempt_transitions.claim_id IS
    'When set, this row also records the claim (pending -> in_flight) of the flight its move ended, listed under this id before the row''s own move (decision 220)';
COMMENT ON COLUMN attempt_transitions.call_id IS
    'When set, this row also records the gateway call that caused its move: the call''s id, taken from gateway_calls_id_seq, and its evidence in the other call_* columns, as a gateway_calls row would hold them (decision 221)';
CREATE INDEX attempt_transitions_attempt_idx ON attempt_transitions (payment_attempt_id, id);
CREATE INDEX attempt_transitions_at_brin ON attempt_transitions USING brin (at) WITH (autosummarize = on);

CREATE SEQUENCE gateway_calls_id_seq;
CREATE TABLE gateway_calls (
    id                 bigint NOT NULL DEFAULT nextval('gateway_calls_id_seq'),
    payment_attempt_id uuid NOT NULL,
    operation          text NOT NULL,
    idempotency_key    text NOT NULL,
    try_number         integer NOT NULL,
    lease_token        bigint,
    started_at         timestamptz NOT NULL,
    finished_at        timestamptz NOT NULL,
    http_status        integer,
    outcome            text NOT NULL,
    gateway_charge_id  text,
    error              text,
    CONSTRAINT gateway_calls_error_check CHECK (length(error) <= 1024),
    CONSTRAINT gateway_calls_operation_check CHECK (operation IN ('charge', 'lookup', 'prepare', 'cancel', 'list', 'refund', 'refund_lookup')),
    CONSTRAINT gateway_calls_try_number_check CHECK (try_number >= 0)
) PARTITION BY RANGE (started_at);
ALTER SEQUENCE gateway_calls_id_seq OWNED BY gateway_calls.id;
CREATE INDEX gateway_calls_attempt_idx ON gateway_calls (payment_attempt_id, id);
CREATE INDEX gateway_calls_started_at_brin ON gateway_calls USING brin (started_at) WITH (autosummarize = on);

-- The entry a claim writes to the history, from the columns of the attempt's row: one
-- function, so the open claim the view shows and the row the trigger below writes agree.
CREATE FUNCTION onecharge_claim_entry(hand_over boolean, lease_owner text, tries integer, lease_token bigint) RETURNS TABLE(cause text, actor text, detail text)
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT CASE WHEN hand_over THEN 'claimed_for_hand_over' ELSE 'dispatched' END,
           'executor:' || coalesce(lease_owner, '?'),
           CASE WHEN hand_over THEN 'past its retry window; lease token ' || lease_token
                ELSE 'try ' || tries || ', lease token ' || lease_token END
$$;

-- A move out of in_flight that does not carry its claim gets the claim written as a row of
-- its own (decision 220). An AFTER trigger with a WHEN: a BEFORE row trigger would lock
-- every updated row first, and the settlement, which carries its claim, never fires it.
CREATE FUNCTION onecharge_claim_written() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO attempt_transitions
        (id, payment_attempt_id, from_status, to_status, cause, actor, detail, at)
    SELECT OLD.claim_id, OLD.payment_attempt_id, 'pending', 'in_flight', e.cause, e.actor,
           e.detail, OLD.claim_at
    FROM onecharge_claim_entry(OLD.claim_hand_over, OLD.lease_owner, OLD.tries,
                               OLD.lease_token) e;
    UPDATE payment_attempts SET claim_id = NULL, claim_at = NULL, claim_hand_over = NULL
    WHERE payment_attempt_id = OLD.payment_attempt_id AND claim_id = OLD.claim_id;
    RETURN NULL;
END $$;
CREATE TRIGGER attempt_claim_written AFTER UPDATE OF status ON payment_attempts
    FOR EACH ROW
    WHEN (OLD.claim_id IS NOT NULL AND NEW.claim_id IS NOT DISTINCT FROM OLD.claim_id
          AND OLD.status = 'in_flight' AND NEW.status IS DISTINCT FROM 'in_flight')
    EXECUTE FUNCTION onecharge_claim_written();

-- The history as readers see it: an attempt's creation (from its row), its transitions with
-- the claims they carry, and an open claim (decisions 219, 220); and every gateway call,
-- whether a row of its own or carried by the move it caused (decision 221).
CREATE VIEW attempt_open_claims AS
    SELECT a.payment_attempt_id, a.claim_id AS id, 'pending'::text AS from_status,
           'in_flight'::text AS to_status, e.cause, e.actor, e.detail, a.claim_at AS at
    FROM payment_attempts a
    CROSS JOIN LATERAL onecharge_claim_entry(a.claim_hand_over, a.lease_owner, a.tries,
                                             a.lease_token) e
    WHERE a.claim_id IS NOT NULL;
COMMENT ON VIEW attempt_open_claims IS
    'The claims recorded on their attempt''s row and not yet in attempt_transitions (decision 220)';

CREATE VIEW attempt_history AS
    SELECT payment_attempt_id, 0::bigint AS id, NULL::text AS from_status,
           'pending'::text AS to_status, 'command_accepted'::text AS cause,
           accepted_by AS actor,
           'message ' || first_message_id || ' (stream sequence ' || first_stream_sequence
               || ')' AS detail,
           created_at AS at
    FROM payment_attempts
    WHERE accepted_by IS NOT NULL
    UNION ALL
    SELECT t.payment_attempt_id, m.id, m.from_status, m.to_status, m.cause, m.actor,
           m.detail, m.at
    FROM attempt_transitions t
    CROSS JOIN LATERAL (
        VALUES (t.claim_id, 'pending'::text, 'in_flight'::text, t.claim_cause, t.claim_actor,
                t.claim_detail, t.claim_at),
               (t.id, t.from_status, t.to_status, t.cause, t.actor, t.detail, t.at)
    ) AS m(id, from_status, to_status, cause, actor, detail, at)
    WHERE m.id IS NOT NULL
    UNION ALL
    SELECT payment_attempt_id, id, from_status, to_status, cause, actor, detail, at
    FROM attempt_open_claims;
COMMENT ON VIEW attempt_history IS
    'An attempt''s history, in the order of id: its creation, read from its row when the row records it (id 0), then its transitions, a flight''s claim listed from the row of the move that ended it, and an open claim from the attempt''s row (decisions 219, 220)';

CREATE VIEW gateway_call_records AS
    SELECT id, payment_attempt_id, operation, idempotency_key, try_number, lease_token,
           started_at, finished_at, http_status, outcome, gateway_charge_id, error
    FROM gateway_calls
    UNION ALL
    SELECT call_id, payment_attempt_id, call_operation, call_idempotency_key,
           call_try_number, call_lease_token, call_started_at, call_finished_at,
           call_http_status, call_outcome, call_gateway_charge_id, call_error
    FROM attempt_transitions
    WHERE call_id IS NOT NULL;
COMMENT ON VIEW gateway_call_records IS
    'Every gateway call, in the order of id: the rows of gateway_calls and the calls carried by the move they caused in attempt_transitions (decision 221)';

------------------------------------------------------------------------------------------
-- What operators search and count
------------------------------------------------------------------------------------------

-- The columns attempts are searched by, which never change after intake, in a narrow table
-- written once per attempt by a statement trigger, so the hot row of payment_attempts
-- carries no search index (decision 214). It follows a person's rare change of those
-- columns and an attempt's deletion.
CREATE TABLE attempt_search (
    payment_attempt_id uuid NOT NULL,
    created_at         timestamptz NOT NULL,
    order_id           text NOT NULL,
    customer_id        text NOT NULL
);
COMMENT ON TABLE attempt_search IS
    'The columns operators search attempts by, which never change after intake: one row per payment_attempts row, written with it by a trigger and never updated (decision 214)';
CREATE INDEX attempt_search_created_idx ON attempt_search (created_at DESC, payment_attempt_id DESC);
CREATE INDEX attempt_search_order_idx ON attempt_search (order_id, created_at DESC, payment_attempt_id DESC);
CREATE INDEX attempt_search_customer_idx ON attempt_search (customer_id, created_at DESC, payment_attempt_id DESC);
CREATE FUNCTION attempt_search_copy() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO attempt_search (payment_attempt_id, created_at, order_id, customer_id)
    SELECT n.payment_attempt_id, n.created_at, n.order_id, n.customer_id FROM new_attempts n;
    RETURN NULL;
END $$;
CREATE FUNCTION attempt_search_follow() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE attempt_search
    SET payment_attempt_id = NEW.payment_attempt_id, created_at = NEW.created_at,
        order_id = NEW.order_id, customer_id = NEW.customer_id
    WHERE created_at = OLD.created_at AND payment_attempt_id = OLD.payment_attempt_id;
    RETURN NULL;
END $$;
CREATE FUNCTION attempt_search_forget() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    DELETE FROM attempt_search s USING old_attempts o
    WHERE s.created_at = o.created_at AND s.payment_attempt_id = o.payment_attempt_id;
    RETURN NULL;
END $$;
CREATE TRIGGER attempt_search_copy
    AFTER INSERT ON payment_attempts
    REFERENCING NEW TABLE AS new_attempts
    FOR EACH STATEMENT
    EXECUTE FUNCTION attempt_search_copy();
CREATE TRIGGER attempt_search_follow
    AFTER UPDATE OF payment_attempt_id, created_at, order_id, customer_id ON payment_attempts
    FOR EACH ROW
    EXECUTE FUNCTION attempt_search_follow();
CREATE TRIGGER attempt_search_forget
    AFTER DELETE ON payment_attempts
    REFERENCING OLD TABLE AS old_attempts
    FOR EACH STATEMENT
    EXECUTE FUNCTION attempt_search_forget();

-- Attempts per status, kept exactly by the database in the transaction of every write
-- (decision 091): each statement appends one delta per status it changed (no hot counter
-- row, so writers never wait on each other), and readers fold the deltas into the counts.
-- The deltas churn, so autovacuum visits them every 10,000 rows whatever their size.
CREATE TABLE attempt_status_counts (
    status text NOT NULL,
    n      bigint NOT NULL,
    CONSTRAINT attempt_status_counts_pkey PRIMARY KEY (status)
);
CREATE TABLE attempt_status_count_deltas (
    status text NOT NULL,
    n      bigint NOT NULL
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000, autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 10000);
CREATE FUNCTION attempt_status_count_inserted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO attempt_status_count_deltas (status, n)
    SELECT status, count(*) FROM inserted_rows GROUP BY status;
    RETURN NULL;
END $$;
CREATE FUNCTION attempt_status_count_updated() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO attempt_status_count_deltas (status, n)
    SELECT status, sum(n) FROM (
        SELECT status, 1 AS n FROM new_rows
        UNION ALL
        SELECT status, -1 FROM old_rows
    ) moved
    GROUP BY status
    HAVING sum(n) <> 0;
    RETURN NULL;
END $$;
CREATE FUNCTION attempt_status_count_deleted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO attempt_status_count_deltas (status, n)
    SELECT status, -count(*) FROM deleted_rows GROUP BY status;
    RETURN NULL;
END $$;
CREATE FUNCTION attempt_status_count_truncated() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    TRUNCATE attempt_status_counts, attempt_status_count_deltas;
    RETURN NULL;
END $$;
CREATE TRIGGER attempt_status_count_inserted
    AFTER INSERT ON payment_attempts
    REFERENCING NEW TABLE AS inserted_rows
    FOR EACH STATEMENT
    EXECUTE FUNCTION attempt_status_count_inserted();
CREATE TRIGGER attempt_status_count_updated
    AFTER UPDATE ON payment_attempts
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT
    EXECUTE FUNCTION attempt_status_count_updated();
CREATE TRIGGER attempt_status_count_deleted
    AFTER DELETE ON payment_attempts
    REFERENCING OLD TABLE AS deleted_rows
    FOR EACH STATEMENT
    EXECUTE FUNCTION attempt_status_count_deleted();
CREATE TRIGGER attempt_status_count_truncated
    AFTER TRUNCATE ON payment_attempts
    FOR EACH STATEMENT
    EXECUTE FUNCTION attempt_status_count_truncated();

------------------------------------------------------------------------------------------
-- The outbox: events written with the state they announce
------------------------------------------------------------------------------------------

-- Every event, written in the transaction of the state it announces and published by the
-- relay. Partitioned by month like the history (decision 085); its months are filled to
-- 50 % so that the relay's mark (`published_at`, in no index) is a HOT update (decision
-- 171). A finding's event has no attempt.
CREATE TABLE outbox (
    event_id           uuid NOT NULL,
    payment_attempt_id uuid,
    status             text NOT NULL,
    subject            text NOT NULL,
    headers            jsonb NOT NULL,
    payload            jsonb NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    published_at       timestamptz,
    publish_attempts   integer NOT NULL DEFAULT 0,
    last_error         text,
    next_attempt_at    timestamptz,
    CONSTRAINT outbox_pkey PRIMARY KEY (event_id, created_at),
    CONSTRAINT outbox_status_check CHECK (status IN ('succeeded', 'declined', 'expired', 'needs_review', 'finding', 'refund_succeeded', 'refund_failed', 'refund_dead_letter')),
    CONSTRAINT outbox_attempt_unless_finding CHECK ((payment_attempt_id IS NOT NULL) OR (status = 'finding'))
) PARTITION BY RANGE (created_at);

-- "One event per final state" across the months: a table kept as long as the attempts,
-- filled by the outbox's statement trigger (decisions 086, 119); a second, different event
-- fails with 23505 on its key. An attempt's other events are found by attempt in
-- outbox_attempt_events, so the outbox keeps no index of the attempt (decision 216).
CREATE TABLE outbox_final_states (
    payment_attempt_id uuid NOT NULL,
    status             text NOT NULL,
    event_id           uuid NOT NULL,
    CONSTRAINT outbox_one_event_per_final_state PRIMARY KEY (payment_attempt_id, status),
    CONSTRAINT outbox_final_states_status_check CHECK (status IN ('succeeded', 'declined', 'expired'))
);
CREATE TABLE outbox_attempt_events (
    payment_attempt_id uuid NOT NULL,
    event_id           uuid NOT NULL,
    created_at         timestamptz NOT NULL,
    CONSTRAINT outbox_attempt_events_pkey PRIMARY KEY (payment_attempt_id, event_id)
);
COMMENT ON TABLE outbox_attempt_events IS
    'An attempt''s events that are not its final state''s (review, refunds), by attempt, with the outbox key (event_id, created_at); the final states''s are in outbox_final_states (decision 216)';

-- The relay's queue: one row per insert statement into the outbox (at most 64 events),
-- claimed with SKIP LOCKED and deleted once JetStream acknowledged its events (decision
-- 171); a refused event comes back as a row of its own, due later (decision 027).
CREATE TABLE outbox_unpublished (
    id              bigint GENERATED ALWAYS AS IDENTITY,
    event_ids       uuid[] NOT NULL,
    created_ats     timestamptz[] NOT NULL,
    next_attempt_at timestamptz,
    CONSTRAINT outbox_unpublished_pkey PRIMARY KEY (id),
    CONSTRAINT outbox_unpublished_events_check
        CHECK ((cardinality(event_ids) BETWEEN 1 AND 64) AND cardinality(created_ats) = cardinality(event_ids))
);
COMMENT ON TABLE outbox_unpublished IS
    'Events waiting for the relay, by (event_ids[i], created_ats[i]) = the outbox key; a row is deleted when its events are published (decision 171)';

CREATE FUNCTION outbox_record_attempt_events() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    -- One event per final state: a second, different event for it fails (23505 on
    -- outbox_one_event_per_final_state); the same event again passes.
    INSERT INTO outbox_final_states (payment_attempt_id, status, event_id)
    SELECT n.payment_attempt_id, n.status, n.event_id
    FROM new_events n
    WHERE n.status IN ('succeeded', 'declined', 'expired')
      AND NOT EXISTS (
          SELECT 1 FROM outbox_final_states f
          WHERE f.payment_attempt_id = n.payment_attempt_id AND f.status = n.status
            AND f.event_id = n.event_id);
    -- The attempt's other events, found by attempt in this table only.
    INSERT INTO outbox_attempt_events (payment_attempt_id, event_id, created_at)
    SELECT n.payment_attempt_id, n.event_id, n.created_at
    FROM new_events n
    WHERE n.payment_attempt_id IS NOT NULL
      AND n.status NOT IN ('succeeded', 'declined', 'expired')
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;
CREATE FUNCTION outbox_queue_unpublished() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO outbox_unpublished (event_ids, created_ats)
    SELECT array_agg(e.event_id ORDER BY e.n), array_agg(e.created_at ORDER BY e.n)
    FROM (SELECT n.event_id, n.created_at,
                 row_number() OVER (ORDER BY n.created_at, n.event_id) - 1 AS n
          FROM new_events n
          WHERE n.published_at IS NULL) e
    GROUP BY e.n / 64
    ORDER BY e.n / 64;
    RETURN NULL;
END $$;
CREATE TRIGGER outbox_record_attempt_events
    AFTER INSERT ON outbox
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT
    EXECUTE FUNCTION outbox_record_attempt_events();
CREATE TRIGGER outbox_queue_unpublished
    AFTER INSERT ON outbox
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT
    EXECUTE FUNCTION outbox_queue_unpublished();

-- Times in events, as RFC 3339 in UTC with only the digits the microseconds need.
CREATE FUNCTION onecharge_rfc3339(t timestamp with time zone) RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
        || COALESCE('.' || NULLIF(rtrim(to_char(t AT TIME ZONE 'UTC', 'US'), '0'), ''), '')
        || 'Z'
$$;

------------------------------------------------------------------------------------------
-- Refunds
------------------------------------------------------------------------------------------

-- One row per refund, moved by the refund worker like an attempt (decision 150); its key
-- is derived from its id. refund_totals is the one row per charge whose CHECK keeps the
-- refunds within the charge (decision 151); refund_final_events holds one event per
-- refund's final state. Refund transitions are few and kept with the refund: not
-- partitioned.
CREATE TABLE refunds (
    refund_id          uuid NOT NULL,
    payment_attempt_id uuid NOT NULL,
    requested_minor    bigint,
    amount_minor       bigint,
    currency           text,
    reason             text NOT NULL,
    metadata           jsonb,
    requested_at       timestamptz,
    fingerprint        bytea NOT NULL,
    idempotency_key    text NOT NULL,
    status             text NOT NULL,
    gateway_charge_id  text,
    gateway_refund_id  text,
    tries              integer NOT NULL DEFAULT 0,
    lookups            integer NOT NULL DEFAULT 0,
    next_run_at        timestamptz NOT NULL DEFAULT now(),
    lease_owner        text,
    lease_token        bigint NOT NULL DEFAULT 0,
    lease_expires_at   timestamptz,
    first_sent_at      timestamptz,
    last_sent_at       timestamptz,
    failure_reason     text,
    review_reason      text,
    last_error         text,
    first_message_id   text NOT NULL,
    correlation_id     text,
    traceparent        text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    settled_at         timestamptz,
    CONSTRAINT refunds_pkey PRIMARY KEY (refund_id),
    CONSTRAINT refunds_admitted_has_amount CHECK ((status IN ('waiting', 'refused')) OR ((amount_minor IS NOT NULL) AND (currency IS NOT NULL) AND (gateway_charge_id IS NOT NULL))),
    CONSTRAINT refunds_amount_minor_check CHECK (amount_minor BETWEEN 1 AND 1000000000000),
    CONSTRAINT refunds_currency_check CHECK (currency ~ '^[A-Z]{3}$'),
    CONSTRAINT refunds_failure_reason_check CHECK (length(failure_reason) <= 1024),
    CONSTRAINT refunds_fingerprint_check CHECK (length(fingerprint) = 32),
    CONSTRAINT refunds_gateway_refund_id_check CHECK (length(gateway_refund_id) BETWEEN 1 AND 255),
    CONSTRAINT refunds_idempotency_key_derived CHECK (idempotency_key = ('onecharge-refund-' || (refund_id)::text)),
    CONSTRAINT refunds_last_error_check CHECK (length(last_error) <= 1024),
    CONSTRAINT refunds_lease_only_in_flight CHECK ((status = 'in_flight') = (lease_expires_at IS NOT NULL)),
    CONSTRAINT refunds_lease_token_check CHECK (lease_token >= 0),
    CONSTRAINT refunds_lookups_check CHECK (lookups >= 0),
    CONSTRAINT refunds_reason_check CHECK (length(reason) BETWEEN 1 AND 500),
    CONSTRAINT refunds_refused_has_reason CHECK ((status NOT IN ('refused', 'failed')) OR (failure_reason IS NOT NULL)),
    CONSTRAINT refunds_requested_minor_check CHECK (requested_minor BETWEEN 1 AND 1000000000000),
    CONSTRAINT refunds_review_has_reason CHECK ((status <> 'needs_review') OR (review_reason IS NOT NULL)),
    CONSTRAINT refunds_review_reason_check CHECK (length(review_reason) <= 1024),
    CONSTRAINT refunds_status_check CHECK (status IN ('waiting', 'pending', 'in_flight', 'processing', 'unknown', 'succeeded', 'failed', 'refused', 'needs_review')),
    CONSTRAINT refunds_succeeded_has_gateway_id CHECK ((status <> 'succeeded') OR (gateway_refund_id IS NOT NULL)),
    CONSTRAINT refunds_tries_check CHECK (tries >= 0)
);
CREATE INDEX refunds_due_idx ON refunds (next_run_at) WHERE status IN ('waiting', 'pending', 'processing', 'unknown');
CREATE INDEX refunds_in_flight_lease_idx ON refunds (lease_expires_at) WHERE status = 'in_flight';
CREATE INDEX refunds_attempt_idx ON refunds (payment_attempt_id, created_at);
CREATE INDEX refunds_created_idx ON refunds (created_at DESC, refund_id DESC);
CREATE INDEX refunds_status_created_idx ON refunds (status, created_at DESC);
CREATE INDEX refunds_gateway_refund_idx ON refunds (gateway_refund_id) WHERE gateway_refund_id IS NOT NULL;
CREATE TABLE refund_totals (
    payment_attempt_id uuid NOT NULL,
    charged_minor      bigint NOT NULL,
    reserved_minor     bigint NOT NULL DEFAULT 0,
    CONSTRAINT refund_totals_pkey PRIMARY KEY (payment_attempt_id),
    CONSTRAINT refund_totals_charged_minor_check CHECK (charged_minor > 0),
    CONSTRAINT refund_totals_never_above_the_charge CHECK ((reserved_minor >= 0) AND (reserved_minor <= charged_minor))
);
CREATE TABLE refund_transitions (
    id                 bigint GENERATED ALWAYS AS IDENTITY,
    refund_id          uuid NOT NULL,
    payment_attempt_id uuid NOT NULL,
    from_status        text,
    to_status          text NOT NULL,
    cause              text NOT NULL,
    actor              text NOT NULL,
    detail             text,
    at                 timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT refund_transitions_pkey PRIMARY KEY (id),
    CONSTRAINT refund_transitions_detail_check CHECK (length(detail) <= 2048)
);
CREATE INDEX refund_transitions_refund_idx ON refund_transitions (refund_id, id);
CREATE INDEX refund_transitions_attempt_idx ON refund_transitions (payment_attempt_id, id);
CREATE TABLE refund_final_events (
    refund_id uuid NOT NULL,
    status    text NOT NULL,
    event_id  uuid NOT NULL,
    CONSTRAINT refund_final_events_pkey PRIMARY KEY (refund_id),
    CONSTRAINT refund_final_events_status_check CHECK (status IN ('succeeded', 'failed', 'refused'))
);

------------------------------------------------------------------------------------------
-- The gateway's side: webhooks and the fleet's rate limit
------------------------------------------------------------------------------------------

-- Stripe's webhook events seen (their ids, for replays), and the gateway objects a webhook
-- named that the reconciler should look at: a webhook is a reason to look, never evidence
-- (decisions 110, 128).
CREATE TABLE stripe_webhook_events (
    event_id           text NOT NULL,
    event_type         text NOT NULL,
    payment_intent_id  text,
    payment_attempt_id uuid,
    outcome            text NOT NULL,
    received_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT stripe_webhook_events_pkey PRIMARY KEY (event_id),
    CONSTRAINT stripe_webhook_events_event_id_check CHECK (length(event_id) BETWEEN 1 AND 255),
    CONSTRAINT stripe_webhook_events_event_type_check CHECK (length(event_type) BETWEEN 1 AND 255)
);
CREATE INDEX stripe_webhook_events_received_idx ON stripe_webhook_events (received_at);
CREATE TABLE gateway_object_checks (
    gateway_object_id  text NOT NULL,
    payment_attempt_id uuid NOT NULL,
    reasons            text[] NOT NULL,
    webhook_event_id   text NOT NULL,
    due_at             timestamptz NOT NULL DEFAULT now(),
    tries              integer NOT NULL DEFAULT 0,
    created_at         timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT gateway_object_checks_pkey PRIMARY KEY (gateway_object_id),
    CONSTRAINT gateway_object_checks_gateway_object_id_check CHECK (length(gateway_object_id) BETWEEN 1 AND 255)
);
CREATE INDEX gateway_object_checks_due_idx ON gateway_object_checks (due_at);

-- The fleet-wide token bucket of `gateway_max_rate`, one row per gateway (decisions 062, 065).
CREATE TABLE gateway_rate_buckets (
    gateway     text NOT NULL,
    tokens      double precision NOT NULL,
    refilled_at timestamptz NOT NULL,
    granted     integer NOT NULL DEFAULT 0,
    CONSTRAINT gateway_rate_buckets_pkey PRIMARY KEY (gateway),
    CONSTRAINT gateway_rate_buckets_gateway_check CHECK (length(gateway) BETWEEN 1 AND 1024),
    CONSTRAINT gateway_rate_buckets_granted_check CHECK (granted >= 0),
    CONSTRAINT gateway_rate_buckets_tokens_check CHECK (tokens >= (0)::double precision)
);

------------------------------------------------------------------------------------------
-- Reconciliation: sweeps and findings
------------------------------------------------------------------------------------------

-- A sweep reads the gateway's list into reconciliation_sweep_records and compares in SQL
-- batches (decision 107). The records are a working copy, read again if lost: UNLOGGED, no
-- WAL. Overlapping windows never run at once (the exclusion constraint), and a running
-- sweep heartbeats (decisions 129, 241).
CREATE TABLE reconciliation_sweeps (
    id              bigint GENERATED ALWAYS AS IDENTITY,
    window_from     timestamptz NOT NULL,
    window_to       timestamptz NOT NULL,
    actor           text NOT NULL,
    started_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    pages           integer NOT NULL DEFAULT 0,
    records         bigint NOT NULL DEFAULT 0,
    findings        integer NOT NULL DEFAULT 0,
    settled         integer NOT NULL DEFAULT 0,
    error           text,
    records_seen    bigint NOT NULL DEFAULT 0,
    records_skipped bigint NOT NULL DEFAULT 0,
    heartbeat_at    timestamptz,
    CONSTRAINT reconciliation_sweeps_one_running_per_window EXCLUDE USING gist (tstzrange(window_from, window_to) WITH &&) WHERE (finished_at IS NULL),
    CONSTRAINT reconciliation_sweeps_pkey PRIMARY KEY (id)
);
COMMENT ON COLUMN reconciliation_sweeps.records IS
    'records kept and compared: onecharge''s, with an outcome';
CREATE UNLOGGED TABLE reconciliation_sweep_records (
    sweep_id           bigint NOT NULL,
    charge_id          text NOT NULL,
    reference          text,
    payment_attempt_id uuid,
    status             text NOT NULL,
    amount_minor       bigint,
    currency           text,
    customer           text,
    idempotency_key    text,
    amount_refunded    bigint,
    CONSTRAINT reconciliation_sweep_records_pkey PRIMARY KEY (sweep_id, charge_id)
);
CREATE INDEX reconciliation_sweep_records_attempt_idx ON reconciliation_sweep_records (sweep_id, payment_attempt_id);
CREATE TABLE reconciliation_sweep_schedule (
    name    text NOT NULL,
    next_at timestamptz NOT NULL,
    CONSTRAINT reconciliation_sweep_schedule_pkey PRIMARY KEY (name)
);

-- One finding per discrepancy, keyed by its evidence; a resolved one says who and why
-- (decisions 109, 127, 131).
CREATE TABLE reconciliation_findings (
    id                   bigint GENERATED ALWAYS AS IDENTITY,
    class                text NOT NULL,
    dedupe_key           text NOT NULL,
    payment_attempt_id   uuid,
    reference            text,
    gateway_ids          text[] NOT NULL DEFAULT '{}'::text[],
    attempt_status       text,
    attempt_amount_minor bigint,
    attempt_currency     text,
    gateway_amount_minor bigint,
    gateway_currency     text,
    detail               text NOT NULL,
    source               text NOT NULL,
    first_seen_at        timestamptz NOT NULL DEFAULT now(),
    last_seen_at         timestamptz NOT NULL DEFAULT now(),
    seen_count           integer NOT NULL DEFAULT 1,
    state                text NOT NULL DEFAULT 'open'::text,
    resolved_at          timestamptz,
    resolved_by          text,
    resolution           text,
    evidence             text NOT NULL DEFAULT ''::text,
    subject_key          text,
    CONSTRAINT reconciliation_findings_dedupe UNIQUE (dedupe_key),
    CONSTRAINT reconciliation_findings_pkey PRIMARY KEY (id),
    CONSTRAINT reconciliation_findings_class_check CHECK (class IN ('charged_not_recorded', 'charged_twice', 'recorded_not_charged', 'disputed', 'mismatch', 'unknown_reference')),
    CONSTRAINT reconciliation_findings_detail_check CHECK (length(detail) BETWEEN 1 AND 2000),
    CONSTRAINT reconciliation_findings_evidence_check CHECK (length(evidence) <= 200),
    CONSTRAINT reconciliation_findings_resolved_says_who_and_why CHECK (((state = 'open') AND (resolved_at IS NULL) AND (resolved_by IS NULL) AND (resolution IS NULL)) OR ((state = 'resolved') AND (resolved_at IS NOT NULL) AND (resolved_by IS NOT NULL) AND (length(resolution) BETWEEN 1 AND 1000))),
    CONSTRAINT reconciliation_findings_source_check CHECK (source IN ('sweep', 'webhook')),
    CONSTRAINT reconciliation_findings_state_check CHECK (state IN ('open', 'resolved'))
);
CREATE INDEX reconciliation_findings_state_idx ON reconciliation_findings (state, id DESC);
CREATE INDEX reconciliation_findings_subject_idx ON reconciliation_findings (subject_key, id);
CREATE INDEX reconciliation_findings_attempt_idx ON reconciliation_findings (payment_attempt_id) WHERE payment_attempt_id IS NOT NULL;

------------------------------------------------------------------------------------------
-- Operators: the audit trail, console sessions, fleet pauses
------------------------------------------------------------------------------------------

-- Every operator action, written in the action's own transaction (decision 058).
CREATE TABLE operator_audit (
    id                  bigint GENERATED ALWAYS AS IDENTITY,
    at                  timestamptz NOT NULL DEFAULT now(),
    actor               text NOT NULL,
    via                 text NOT NULL,
    action              text NOT NULL,
    payment_attempt_ids uuid[] NOT NULL DEFAULT '{}'::uuid[],
    dlq_sequence        bigint,
    reason              text,
    outcome             text NOT NULL,
    detail              jsonb NOT NULL DEFAULT '{}'::jsonb,
    CONSTRAINT operator_audit_pkey PRIMARY KEY (id),
    CONSTRAINT operator_audit_action_check CHECK (length(action) BETWEEN 1 AND 64),
    CONSTRAINT operator_audit_actor_check CHECK (length(actor) BETWEEN 1 AND 255),
    CONSTRAINT operator_audit_outcome_check CHECK (length(outcome) BETWEEN 1 AND 64),
    CONSTRAINT operator_audit_via_check CHECK (via IN ('cli', 'api', 'console'))
);
CREATE INDEX operator_audit_actor_idx ON operator_audit (actor, id DESC);
CREATE INDEX operator_audit_attempts_idx ON operator_audit USING gin (payment_attempt_ids);

-- Console sessions by the hash of their id (decision 092).
CREATE TABLE console_sessions (
    id_sha256      bytea NOT NULL,
    actor          text NOT NULL,
    csrf           text NOT NULL,
    binding_sha256 bytea NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    expires_at     timestamptz NOT NULL,
    CONSTRAINT console_sessions_pkey PRIMARY KEY (id_sha256),
    CONSTRAINT console_sessions_actor_check CHECK (length(actor) BETWEEN 1 AND 255),
    CONSTRAINT console_sessions_binding_sha256_check CHECK (length(binding_sha256) = 32),
    CONSTRAINT console_sessions_check CHECK (expires_at > created_at),
    CONSTRAINT console_sessions_csrf_check CHECK (csrf ~ '^[0-9a-f]{64}$'),
    CONSTRAINT console_sessions_id_sha256_check CHECK (length(id_sha256) = 32)
);
CREATE INDEX console_sessions_actor_idx ON console_sessions (actor, created_at DESC);
CREATE INDEX console_sessions_expires_idx ON console_sessions (expires_at);

-- A fleet pause is one open row, read by the executor's claim statement (decision 145).
CREATE TABLE fleet_pauses (
    id            bigint GENERATED ALWAYS AS IDENTITY,
    paused_by     text NOT NULL,
    reason        text NOT NULL,
    paused_at     timestamptz NOT NULL DEFAULT now(),
    resumed_by    text,
    resume_reason text,
    resumed_at    timestamptz,
    CONSTRAINT fleet_pauses_pkey PRIMARY KEY (id),
    CONSTRAINT fleet_pauses_check CHECK ((resumed_at IS NULL) = (resumed_by IS NULL)),
    CONSTRAINT fleet_pauses_paused_by_check CHECK (length(paused_by) BETWEEN 1 AND 255),
    CONSTRAINT fleet_pauses_reason_check CHECK (length(reason) BETWEEN 1 AND 4000),
    CONSTRAINT fleet_pauses_resume_reason_check CHECK (length(resume_reason) <= 4000),
    CONSTRAINT fleet_pauses_resumed_by_check CHECK (length(resumed_by) BETWEEN 1 AND 255)
);
CREATE UNIQUE INDEX fleet_pauses_one_open ON fleet_pauses ((true)) WHERE resumed_at IS NULL;

------------------------------------------------------------------------------------------
-- The owner's steps, and the history's months
------------------------------------------------------------------------------------------

-- `serve` runs as a role that cannot change the schema (decision 160). The few steps it
-- needs an owner's rights for are functions that run as their owner and do that one step:
-- retention makes, detaches and drops the months of the three partitioned tables (checked
-- by name: a history table, a partition `<table>_pYYYYMM`), and the sweep refreshes its
-- records' statistics. A new outbox month is filled to 50 % like the first ones.
CREATE FUNCTION onecharge_history_month_checked(parent text, partition text) RETURNS void
    LANGUAGE plpgsql
    AS $_$
BEGIN
    IF parent IS NULL OR parent NOT IN ('attempt_transitions', 'gateway_calls', 'outbox') THEN
        RAISE EXCEPTION 'onecharge: % is not a history table', parent
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF partition IS NOT NULL AND partition !~ ('^' || parent || '_p[0-9]{6}$') THEN
        RAISE EXCEPTION 'onecharge: % is not a month partition of %', partition, parent
            USING ERRCODE = 'insufficient_privilege';
    END IF;
END $_$;
CREATE FUNCTION onecharge_history_grant_as_parent(parent text, partition text) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    granted record;
BEGIN
    FOR granted IN
        SELECT acl.grantee, acl.privilege_type
        FROM pg_class c, aclexplode(c.relacl) acl
        WHERE c.oid = parent::regclass AND acl.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT %s ON %I TO %s', granted.privilege_type, partition,
            CASE WHEN granted.grantee = 0 THEN 'PUBLIC'
                 ELSE quote_ident(pg_get_userbyid(granted.grantee)) END);
    END LOOP;
END $$;
CREATE FUNCTION onecharge_history_month_storage(parent text) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT CASE WHEN parent = 'outbox' THEN ' WITH (fillfactor = 50)' ELSE '' END
$$;
CREATE FUNCTION onecharge_history_ensure_default(parent text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    AS $$
BEGIN
    PERFORM onecharge_history_month_checked(parent, NULL);
    IF to_regclass(quote_ident(parent || '_default')) IS NULL THEN
        EXECUTE format('CREATE TABLE %I PARTITION OF %I DEFAULT%s', parent || '_default', parent,
            onecharge_history_month_storage(parent));
        PERFORM onecharge_history_grant_as_parent(parent, parent || '_default');
    END IF;
END $$;
CREATE FUNCTION onecharge_history_create_month(parent text, partition text, from_ timestamp with time zone, to_ timestamp with time zone) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    AS $_$
DECLARE
    key text;
    moved bigint;
BEGIN
    PERFORM onecharge_history_month_checked(parent, partition);
    SELECT a.attname INTO STRICT key
    FROM pg_partitioned_table p
    JOIN pg_attribute a ON a.attrelid = p.partrelid AND a.attnum = p.partattrs[0]
    WHERE p.partrelid = parent::regclass;
    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)%s',
        partition, parent, onecharge_history_month_storage(parent));
    EXECUTE format(
        'WITH moved AS (DELETE FROM %I WHERE %I >= $1 AND %I < $2 RETURNING *)
         INSERT INTO %I SELECT * FROM moved',
        parent || '_default', key, key, partition) USING from_, to_;
    GET DIAGNOSTICS moved = ROW_COUNT;
    EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
        parent, partition, from_, to_);
    PERFORM onecharge_history_grant_as_parent(parent, partition);
    RETURN moved;
END $_$;
CREATE FUNCTION onecharge_history_detach_month(parent text, partition text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    AS $$
BEGIN
    PERFORM onecharge_history_month_checked(parent, partition);
    EXECUTE format('ALTER TABLE %I DETACH PARTITION %I', parent, partition);
END $$;
CREATE FUNCTION onecharge_history_drop_month(parent text, partition text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    AS $$
BEGIN
    PERFORM onecharge_history_month_checked(parent, partition);
    IF EXISTS (SELECT 1 FROM pg_class WHERE oid = to_regclass(quote_ident(partition))
               AND relispartition) THEN
        RAISE EXCEPTION 'onecharge: % is still attached to %: detach it first', partition, parent
            USING ERRCODE = 'object_in_use';
    END IF;
    EXECUTE format('DROP TABLE IF EXISTS %I', partition);
END $$;
CREATE FUNCTION onecharge_analyze_sweep_records() RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    AS $$
BEGIN
    ANALYZE reconciliation_sweep_records;
END $$;

-- Their search_path is this schema then pg_temp, so a temporary table of the caller never
-- stands in for a history table; EXECUTE is revoked from PUBLIC, and
-- deploy/postgres/runtime-grants.sql gives it to the runtime role.
DO $$
DECLARE
    signature text;
BEGIN
    FOREACH signature IN ARRAY ARRAY[
        'onecharge_history_month_checked(text, text)',
        'onecharge_history_grant_as_parent(text, text)',
        'onecharge_history_month_storage(text)',
        'onecharge_history_ensure_default(text)',
        'onecharge_history_create_month(text, text, timestamptz, timestamptz)',
        'onecharge_history_detach_month(text, text)',
        'onecharge_history_drop_month(text, text)',
        'onecharge_analyze_sweep_records()'
    ] LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', signature, current_schema());
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', signature);
    END LOOP;
END $$;

-- The months: this one and the next two (UTC) of each history table, and a DEFAULT
-- partition for anything outside them, made by the functions retention uses, so every
-- month has one shape. Retention makes the later months ahead of time. The DEFAULT
-- partitions are the only ones retention deletes rows from (what it keeps of a dropped
-- month), so they carry REPLICA IDENTITY FULL for a logical-replication publication; the
-- months only ever receive inserts (decision 170).
DO $$
DECLARE
    parent text;
    month timestamptz;
BEGIN
    FOREACH parent IN ARRAY ARRAY['attempt_transitions', 'gateway_calls', 'outbox'] LOOP
        PERFORM onecharge_history_ensure_default(parent);
        FOR k IN 0..2 LOOP
            month := (date_trunc('month', now() AT TIME ZONE 'UTC') + make_interval(months => k))
                     AT TIME ZONE 'UTC';
            PERFORM onecharge_history_create_month(
                parent, parent || '_p' || to_char(month AT TIME ZONE 'UTC', 'YYYYMM'),
                month, (month AT TIME ZONE 'UTC' + interval '1 month') AT TIME ZONE 'UTC');
        END LOOP;
    END LOOP;
END $$;
ALTER TABLE attempt_transitions_default REPLICA IDENTITY FULL;
ALTER TABLE gateway_calls_default REPLICA IDENTITY FULL;
