-- Why (issue 38, decision 216): `outbox_attempt_idx (payment_attempt_id)` took an entry for
-- every event, one per charge, so that `attempts show` could list an attempt's events. Yet
-- every final state's event (succeeded, declined, expired: the one event of nearly every
-- attempt) is already recorded by attempt in `outbox_final_states`, whose primary key
-- begins with the attempt id. What only the index found are the attempt's other events: a
-- move into review, a refund's outcome, a refund's dead letter. Those are now recorded by
-- attempt in a small table of their own, by the same statement trigger that records the
-- final states (so every writer of the outbox, and an instance of the previous build during
-- a rolling upgrade, records them), with the event's `created_at`, so that each is read back
-- by the outbox's primary key. A §3 charge writes no row here.
--
-- Online: one short transaction makes the table and swaps the trigger for one whose
-- function does both (SHARE ROW EXCLUSIVE on the outbox for that moment, writers of events
-- wait at most 5 s); the next migration copies the other events written before, the one
-- after drops the old index. The retention job copies a month's kept events into DEFAULT
-- directly, where no statement trigger fires, and with their keys unchanged: their rows here
-- still name them.
SET LOCAL lock_timeout = '5s';

CREATE TABLE outbox_attempt_events (
    payment_attempt_id uuid        NOT NULL,
    event_id           uuid        NOT NULL,
    created_at         timestamptz NOT NULL,
    CONSTRAINT outbox_attempt_events_pkey PRIMARY KEY (payment_attempt_id, event_id)
);
COMMENT ON TABLE outbox_attempt_events IS
    'An attempt''s events that are not its final state''s (review, refunds), by attempt, with the outbox key (event_id, created_at); the final states''s are in outbox_final_states (decision 216)';

CREATE FUNCTION outbox_record_attempt_events() RETURNS trigger LANGUAGE plpgsql AS $$
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

DROP TRIGGER outbox_one_event_per_final_state ON outbox;
CREATE TRIGGER outbox_record_attempt_events AFTER INSERT ON outbox
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_record_attempt_events();
DROP FUNCTION outbox_record_final_states();
