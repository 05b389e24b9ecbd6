-- Signed Stripe webhooks (docs/contract.md §3.3): every accepted event is recorded by its
-- id before the listener answers 2xx, so a redelivery (Stripe retries for days, and may
-- send an event twice) finds its row and changes nothing. A webhook never settles an
-- attempt: it only makes the named PaymentIntent's attempt due for a retrieve by id.
CREATE TABLE stripe_webhook_events (
    event_id           text        PRIMARY KEY CHECK (length(event_id) BETWEEN 1 AND 255),
    event_type         text        NOT NULL CHECK (length(event_type) BETWEEN 1 AND 255),
    payment_intent_id  text,
    payment_attempt_id uuid,
    -- What the event made happen: `woke` (due for a retrieve), `finding`, `ignored`.
    outcome            text        NOT NULL,
    received_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX stripe_webhook_events_received_idx ON stripe_webhook_events (received_at);

-- A refund or a dispute on a succeeded attempt is published for operators to subscribe to
-- (`payments.events.reconciliation-finding.v1`) through the outbox, like every event.
ALTER TABLE outbox DROP CONSTRAINT outbox_status_check;
ALTER TABLE outbox ADD CONSTRAINT outbox_status_check
    CHECK (status IN ('succeeded', 'declined', 'expired', 'needs_review', 'finding'));

-- A webhook names a PaymentIntent; its attempt is found by the stored id.
CREATE INDEX payment_attempts_gateway_object_idx ON payment_attempts (gateway_object_id)
    WHERE gateway_object_id IS NOT NULL;
