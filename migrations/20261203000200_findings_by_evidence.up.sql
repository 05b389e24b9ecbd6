-- Findings keyed by their evidence (issue 35, decision 127). Each distinct aftermath of a
-- charge (each refund, a dispute opened, a dispute lost, the charge missing from the
-- listing) is a finding of its own: `dedupe_key` becomes `subject_key` + `|` + `evidence`,
-- and `subject_key` (class, attempt or reference, gateway ids: what the old key was) groups
-- a charge's findings into its history. Rows from before keep their key and an empty
-- evidence; the first sweep after the upgrade opens each discrepancy it still sees as a new
-- finding with its evidence, the old row (and its resolution) listed as history. All
-- additions: an older instance's INSERT (which names neither column) still works while
-- this one rolls out, its rows with an empty evidence.
ALTER TABLE reconciliation_findings
    ADD COLUMN evidence    text NOT NULL DEFAULT '' CHECK (length(evidence) <= 200),
    ADD COLUMN subject_key text;
UPDATE reconciliation_findings SET subject_key = dedupe_key WHERE subject_key IS NULL;
CREATE INDEX reconciliation_findings_subject_idx ON reconciliation_findings (subject_key, id);

-- Every new finding publishes payments.events.reconciliation-finding.v1 through the
-- outbox, the sweep's too; an `unknown_reference` finding names no attempt. Dropping NOT
-- NULL only changes the catalog (no rewrite, no scan).
ALTER TABLE outbox ALTER COLUMN payment_attempt_id DROP NOT NULL;
ALTER TABLE outbox ADD CONSTRAINT outbox_attempt_unless_finding
    CHECK (payment_attempt_id IS NOT NULL OR status = 'finding') NOT VALID;

-- A webhook never acts on its own word: an event that may show money moved for an
-- attempt onecharge holds as final or in review (a refund, a dispute, a success after a
-- decline) asks for the PaymentIntent to be read again by id; the reconciler reads it,
-- compares it as the sweep would, and records what it shows. One row per PaymentIntent
-- (events about one coalesce), claimed by `due_at` like a lease.
CREATE TABLE gateway_object_checks (
    gateway_object_id  text        PRIMARY KEY CHECK (length(gateway_object_id) BETWEEN 1 AND 255),
    payment_attempt_id uuid        NOT NULL,
    -- The event types that asked, and the last event's id: the evidence's provenance.
    reasons            text[]      NOT NULL,
    webhook_event_id   text        NOT NULL,
    due_at             timestamptz NOT NULL DEFAULT now(),
    tries              integer     NOT NULL DEFAULT 0,
    created_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX gateway_object_checks_due_idx ON gateway_object_checks (due_at);

-- What a listed charge had refunded (Stripe's expanded charge): each refund is evidence.
ALTER TABLE reconciliation_sweep_records ADD COLUMN amount_refunded bigint;
