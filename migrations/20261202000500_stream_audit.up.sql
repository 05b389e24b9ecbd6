-- The stream audit (issue 25, docs/operations.md §13): a broker can lose a command it
-- acknowledged to the producer (nats-server 2.9's R3 replicas diverging, docs/soak.md) and
-- an asynchronous PostgreSQL failover can lose intake's record of one (decision 55); intake
-- never sees either. The audit walks the command stream behind intake's ack floor and
-- compares each stored message with processed_messages and the dead letters.
--
-- How far it has walked, per intake consumer (the dedupe key's first half): work per pass is
-- bounded and a restart resumes instead of starting over. The row is also the audit's lock:
-- a pass holds it FOR UPDATE (SKIP LOCKED), so several `serve` processes audit one at a time.
CREATE TABLE stream_audit_watermarks (
    consumer        text        PRIMARY KEY CHECK (length(consumer) BETWEEN 1 AND 200),
    -- The last command-stream sequence judged (or passed over); the next pass starts after it.
    checked_through bigint      NOT NULL DEFAULT 0 CHECK (checked_through >= 0),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

-- What the audit found: a message the stream holds that intake never recorded nor
-- dead-lettered. Open until its message id is recorded (a replay through intake, or a late
-- redelivery) or an operator's replay of an id-less message. Kept after that, as history.
CREATE TABLE intake_unrecorded_messages (
    consumer           text        NOT NULL CHECK (length(consumer) BETWEEN 1 AND 200),
    stream_sequence    bigint      NOT NULL CHECK (stream_sequence > 0),
    message_id         text        CHECK (length(message_id) BETWEEN 1 AND 200),
    payment_attempt_id uuid,
    stored_at          timestamptz NOT NULL,
    found_at           timestamptz NOT NULL DEFAULT now(),
    replayed_at        timestamptz,
    -- Who replayed it (`operator:<user>`), as the audit trail names actors.
    replayed_by        text        CHECK (length(replayed_by) BETWEEN 1 AND 255),
    resolved_at        timestamptz,
    PRIMARY KEY (consumer, stream_sequence)
);
-- The open findings: the gauge and `onecharge intake audit` read only these.
CREATE INDEX intake_unrecorded_messages_open_idx
    ON intake_unrecorded_messages (consumer, stream_sequence) WHERE resolved_at IS NULL;
