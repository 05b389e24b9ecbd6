-- Refunds as commands (issue 37, decision 150). A RefundPayment command (contract §2.5) is
-- recorded here by its `refund_id`, the producer's dedupe key, in the same transaction as
-- its message's dedupe row (`processed_messages`, under the refund consumer's name).
--
-- A refund waits (`waiting`) until its attempt is final; it is admitted (`pending`) by
-- reserving its amount against what the attempt charged (`refund_totals`); the executor
-- sends it under a fenced lease (`in_flight`); the gateway's answer settles it
-- (`succeeded`, `failed`), leaves it at the gateway (`processing`), or is ambiguous
-- (`unknown`) and the reconciler looks it up. `refused` is a refund never sent: its attempt
-- ended `declined`/`expired`, stayed unsettled past `refunds.max_wait`, or the amount would
-- overdraw the charge. `needs_review`: a person decides, with the reason stored.
CREATE TABLE refunds (
    refund_id          uuid        PRIMARY KEY,
    payment_attempt_id uuid        NOT NULL,
    -- As asked; NULL asks for what is left of the charge when the refund is admitted.
    requested_minor    bigint      CHECK (requested_minor BETWEEN 1 AND 1000000000000),
    -- Fixed on admission (the reservation); what the gateway is asked to refund.
    amount_minor       bigint      CHECK (amount_minor BETWEEN 1 AND 1000000000000),
    currency           text        CHECK (currency ~ '^[A-Z]{3}$'),
    reason             text        NOT NULL CHECK (length(reason) BETWEEN 1 AND 500),
    metadata           jsonb,
    requested_at       timestamptz,
    fingerprint        bytea       NOT NULL CHECK (length(fingerprint) = 32),
    idempotency_key    text        NOT NULL,
    status             text        NOT NULL CHECK (status IN ('waiting', 'pending', 'in_flight',
                                       'processing', 'unknown', 'succeeded', 'failed', 'refused',
                                       'needs_review')),
    -- The charge being refunded as the gateway names it (§3 `ch_…`, Stripe `pi_…`).
    gateway_charge_id  text,
    gateway_refund_id  text        CHECK (length(gateway_refund_id) BETWEEN 1 AND 255),
    tries              integer     NOT NULL DEFAULT 0 CHECK (tries >= 0),
    lookups            integer     NOT NULL DEFAULT 0 CHECK (lookups >= 0),
    next_run_at        timestamptz NOT NULL DEFAULT now(),
    lease_owner        text,
    lease_token        bigint      NOT NULL DEFAULT 0 CHECK (lease_token >= 0),
    lease_expires_at   timestamptz,
    first_sent_at      timestamptz,
    last_sent_at       timestamptz,
    -- The gateway's words for a failure, or why onecharge refused the refund.
    failure_reason     text        CHECK (length(failure_reason) <= 1024),
    review_reason      text        CHECK (length(review_reason) <= 1024),
    last_error         text        CHECK (length(last_error) <= 1024),
    first_message_id   text        NOT NULL,
    correlation_id     text,
    traceparent        text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    settled_at         timestamptz,
    CONSTRAINT refunds_idempotency_key_derived
        CHECK (idempotency_key = 'onecharge-refund-' || refund_id::text),
    CONSTRAINT refunds_lease_only_in_flight
        CHECK ((status = 'in_flight') = (lease_expires_at IS NOT NULL)),
    CONSTRAINT refunds_admitted_has_amount
        CHECK (status IN ('waiting', 'refused') OR
               (amount_minor IS NOT NULL AND currency IS NOT NULL AND gateway_charge_id IS NOT NULL)),
    CONSTRAINT refunds_succeeded_has_gateway_id
        CHECK (status <> 'succeeded' OR gateway_refund_id IS NOT NULL),
    CONSTRAINT refunds_review_has_reason
        CHECK (status <> 'needs_review' OR review_reason IS NOT NULL),
    CONSTRAINT refunds_refused_has_reason
        CHECK (status NOT IN ('refused', 'failed') OR failure_reason IS NOT NULL)
);

CREATE INDEX refunds_attempt_idx ON refunds (payment_attempt_id, created_at);
CREATE INDEX refunds_created_idx ON refunds (created_at DESC, refund_id DESC);
CREATE INDEX refunds_status_created_idx ON refunds (status, created_at DESC);
-- The work queues: what the executor admits and sends, what the reconciler looks up.
CREATE INDEX refunds_due_idx ON refunds (next_run_at)
    WHERE status IN ('waiting', 'pending', 'processing', 'unknown');
CREATE INDEX refunds_in_flight_lease_idx ON refunds (lease_expires_at)
    WHERE status = 'in_flight';
CREATE INDEX refunds_gateway_refund_idx ON refunds (gateway_refund_id)
    WHERE gateway_refund_id IS NOT NULL;

-- What each charge has promised back: every admitted refund reserves its amount here, a
-- refund that failed or was refused gives it back. The CHECK is the guarantee that the
-- sum of succeeded and in-flight refunds never exceeds the charge: two refunds admitted at
-- once on two instances serialize on this row, and the second one past the charge is
-- refused by the database itself.
CREATE TABLE refund_totals (
    payment_attempt_id uuid   PRIMARY KEY,
    charged_minor      bigint NOT NULL CHECK (charged_minor > 0),
    reserved_minor     bigint NOT NULL DEFAULT 0,
    CONSTRAINT refund_totals_never_above_the_charge
        CHECK (reserved_minor >= 0 AND reserved_minor <= charged_minor)
);

-- Every move of a refund, with its cause and actor: the refund's part of its attempt's
-- timeline. Small (refunds are few beside charges), so not partitioned.
CREATE TABLE refund_transitions (
    id                 bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    refund_id          uuid        NOT NULL,
    payment_attempt_id uuid        NOT NULL,
    from_status        text,
    to_status          text        NOT NULL,
    cause              text        NOT NULL,
    actor              text        NOT NULL,
    detail             text        CHECK (length(detail) <= 2048),
    at                 timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX refund_transitions_attempt_idx ON refund_transitions (payment_attempt_id, id);
CREATE INDEX refund_transitions_refund_idx ON refund_transitions (refund_id, id);

-- One event per final refund state, enforced by the database (like `outbox_final_states`).
CREATE TABLE refund_final_events (
    refund_id uuid PRIMARY KEY,
    status    text NOT NULL CHECK (status IN ('succeeded', 'failed', 'refused')),
    event_id  uuid NOT NULL
);

-- Refund events and later dead letters go through the outbox like every event. NOT VALID
-- then VALIDATE: the outbox is checked without holding writers off it.
ALTER TABLE outbox DROP CONSTRAINT outbox_status_check;
ALTER TABLE outbox ADD CONSTRAINT outbox_status_check
    CHECK (status IN ('succeeded', 'declined', 'expired', 'needs_review', 'finding',
                      'refund_succeeded', 'refund_failed', 'refund_dead_letter')) NOT VALID;
ALTER TABLE outbox VALIDATE CONSTRAINT outbox_status_check;

-- A refund's gateway calls are evidence on its attempt's timeline.
ALTER TABLE gateway_calls DROP CONSTRAINT gateway_calls_operation_check;
ALTER TABLE gateway_calls ADD CONSTRAINT gateway_calls_operation_check
    CHECK (operation IN ('charge', 'lookup', 'prepare', 'cancel', 'list', 'refund',
                         'refund_lookup')) NOT VALID;
ALTER TABLE gateway_calls VALIDATE CONSTRAINT gateway_calls_operation_check;

ALTER TABLE processed_messages DROP CONSTRAINT processed_messages_result_check;
ALTER TABLE processed_messages ADD CONSTRAINT processed_messages_result_check
    CHECK (result IN ('accepted', 'business_duplicate', 'stale', 'refund_accepted',
                      'refund_duplicate')) NOT VALID;
ALTER TABLE processed_messages VALIDATE CONSTRAINT processed_messages_result_check;
