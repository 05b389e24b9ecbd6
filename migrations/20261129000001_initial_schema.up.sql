-- Why: intake must record "this broker message was handled" and "this payment attempt exists"
-- in one transaction, and let the database — not a read-then-write in the application —
-- decide what is a duplicate. Every rule that must never be broken is a constraint here.

-- One row per (consumer, message id) that intake recorded. The primary key is the dedupe
-- key: a redelivery or a producer retry with the same Nats-Msg-Id conflicts on it.
-- body_sha256 lets intake tell a harmless redelivery from a producer that reused a
-- message id for a different body. Invalid and conflicting messages never get a row.
CREATE TABLE processed_messages (
    consumer           text        NOT NULL CHECK (length(consumer) BETWEEN 1 AND 200),
    message_id         text        NOT NULL CHECK (length(message_id) BETWEEN 1 AND 200),
    body_sha256        bytea       NOT NULL CHECK (length(body_sha256) = 32),
    payment_attempt_id uuid        NOT NULL,
    result             text        NOT NULL
        CHECK (result IN ('accepted', 'business_duplicate', 'stale')),
    stream_sequence    bigint      NOT NULL CHECK (stream_sequence >= 0),
    recorded_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT processed_messages_pkey PRIMARY KEY (consumer, message_id)
);
-- purge walks rows by age
CREATE INDEX processed_messages_recorded_at_idx ON processed_messages (recorded_at);

-- The work item, keyed by the business idempotency key. Amounts are integer minor units.
-- fingerprint is the SHA-256 of the canonical charge parameters: a second command for the
-- same attempt with a different fingerprint is a conflict, never a second charge.
-- idempotency_key is derived once and stored: every gateway try sends exactly this value.
CREATE TABLE payment_attempts (
    payment_attempt_id   uuid        PRIMARY KEY,
    order_id             text        NOT NULL CHECK (length(order_id) BETWEEN 1 AND 128),
    customer_id          text        NOT NULL CHECK (length(customer_id) BETWEEN 1 AND 128),
    amount_minor         bigint      NOT NULL CHECK (amount_minor > 0 AND amount_minor <= 1000000000000),
    currency             text        NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    payment_method       text        NOT NULL CHECK (length(payment_method) BETWEEN 1 AND 255),
    description          text        CHECK (length(description) <= 500),
    requested_at         timestamptz,
    fingerprint          bytea       NOT NULL CHECK (length(fingerprint) = 32),
    idempotency_key      text        NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    status               text        NOT NULL
        CHECK (status IN ('pending', 'in_flight', 'succeeded', 'declined', 'unknown',
                          'needs_review', 'expired')),
    -- executor bookkeeping
    tries                integer     NOT NULL DEFAULT 0 CHECK (tries >= 0),
    next_run_at          timestamptz NOT NULL DEFAULT now(),
    lease_owner          text,
    lease_token          bigint      NOT NULL DEFAULT 0 CHECK (lease_token >= 0),
    lease_expires_at     timestamptz,
    dispatched_at        timestamptz,
    -- when the gateway first saw this key: its retention window is counted from here
    first_dispatched_at  timestamptz,
    reconcile_checks     integer     NOT NULL DEFAULT 0 CHECK (reconcile_checks >= 0),
    -- outcome
    gateway_charge_id    text,
    decline_code         text,
    last_error           text        CHECK (length(last_error) <= 1024),
    review_reason        text        CHECK (length(review_reason) <= 1024),
    -- provenance
    first_message_id     text        NOT NULL,
    correlation_id       text,
    traceparent          text,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT payment_attempts_idempotency_key_key UNIQUE (idempotency_key),
    -- a lease exists exactly while the attempt is in flight
    CONSTRAINT payment_attempts_lease_only_in_flight
        CHECK ((status = 'in_flight') = (lease_expires_at IS NOT NULL)),
    CONSTRAINT payment_attempts_succeeded_has_charge
        CHECK (status <> 'succeeded' OR gateway_charge_id IS NOT NULL),
    CONSTRAINT payment_attempts_review_has_reason
        CHECK (status <> 'needs_review' OR review_reason IS NOT NULL)
);
-- the executor's claim query: due pending work, oldest due first
CREATE INDEX payment_attempts_pending_due_idx ON payment_attempts (next_run_at)
    WHERE status = 'pending';
-- the reconciler's claim queries
CREATE INDEX payment_attempts_unknown_due_idx ON payment_attempts (next_run_at)
    WHERE status = 'unknown';
CREATE INDEX payment_attempts_in_flight_lease_idx ON payment_attempts (lease_expires_at)
    WHERE status = 'in_flight';
-- operators list by status, newest first
CREATE INDEX payment_attempts_status_created_idx ON payment_attempts (status, created_at DESC);

-- Append-only history: every state change with its time, cause and actor.
CREATE TABLE attempt_transitions (
    id                 bigserial   PRIMARY KEY,
    payment_attempt_id uuid        NOT NULL REFERENCES payment_attempts ON DELETE RESTRICT,
    from_status        text,
    to_status          text        NOT NULL,
    cause              text        NOT NULL,
    actor              text        NOT NULL,
    detail             text        CHECK (length(detail) <= 2048),
    at                 timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX attempt_transitions_attempt_idx ON attempt_transitions (payment_attempt_id, id);

-- Transactional outbox: an event is written in the same transaction as the state it
-- announces and published later by the relay. event_id is the Nats-Msg-Id on the wire.
CREATE TABLE outbox (
    event_id           uuid        PRIMARY KEY,
    payment_attempt_id uuid        NOT NULL REFERENCES payment_attempts ON DELETE RESTRICT,
    status             text        NOT NULL
        CHECK (status IN ('succeeded', 'declined', 'expired', 'needs_review')),
    subject            text        NOT NULL,
    headers            jsonb       NOT NULL,
    payload            jsonb       NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    published_at       timestamptz,
    publish_attempts   integer     NOT NULL DEFAULT 0,
    last_error         text
);
-- exactly one event per final state of an attempt (needs_review may recur after a retry)
CREATE UNIQUE INDEX outbox_one_event_per_final_state
    ON outbox (payment_attempt_id, status)
    WHERE status IN ('succeeded', 'declined', 'expired');
CREATE INDEX outbox_unpublished_idx ON outbox (created_at) WHERE published_at IS NULL;

-- Evidence an operator reads: every call to the gateway, charge or lookup.
CREATE TABLE gateway_calls (
    id                 bigserial   PRIMARY KEY,
    payment_attempt_id uuid        NOT NULL REFERENCES payment_attempts ON DELETE RESTRICT,
    operation          text        NOT NULL CHECK (operation IN ('charge', 'lookup')),
    idempotency_key    text        NOT NULL,
    try_number         integer     NOT NULL CHECK (try_number >= 0),
    lease_token        bigint,
    started_at         timestamptz NOT NULL,
    finished_at        timestamptz NOT NULL,
    http_status        integer,
    outcome            text        NOT NULL,
    gateway_charge_id  text,
    error              text        CHECK (length(error) <= 1024)
);
CREATE INDEX gateway_calls_attempt_idx ON gateway_calls (payment_attempt_id, id);
