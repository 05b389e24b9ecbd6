-- Why (issue 28): the database work per charge. Two changes, no data moved.
--
-- 1. "One event per final state" (outbox_final_states, decision 86) was kept by a row
--    trigger: for every final event, a plpgsql call running a SELECT and an INSERT, two of
--    the 2.1 statements triggers ran per charge. A statement trigger over the insert's
--    transition table does the same once per INSERT: the final events of the statement
--    that are not already recorded (the same event written again, as the retention job's
--    copy does, is the same event and passes) go into outbox_final_states, whose primary
--    key `outbox_one_event_per_final_state` still refuses a second, different event with
--    23505, aborting the statement and its transaction. It fires for inserts into the
--    partitioned parent, the only way onecharge writes the outbox.
--
-- 2. onecharge_rfc3339(t): the text the events' `occurred_at` carries (RFC 3339, UTC, `Z`,
--    the fraction of a second without trailing zeros: exactly what the Rust side's
--    `time::serde::rfc3339` writes), so that a settlement can write its events in the same
--    statement as the move they announce (src/store/attempts.rs). One expression, STABLE
--    like to_char and not STRICT, so that the planner inlines it instead of calling it per
--    row.

DROP TRIGGER outbox_one_event_per_final_state ON outbox;
DROP FUNCTION outbox_record_final_state();

CREATE FUNCTION outbox_record_final_states() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outbox_final_states (payment_attempt_id, status, event_id)
    SELECT n.payment_attempt_id, n.status, n.event_id
    FROM new_events n
    WHERE n.status IN ('succeeded', 'declined', 'expired')
      AND NOT EXISTS (
          SELECT 1 FROM outbox_final_states f
          WHERE f.payment_attempt_id = n.payment_attempt_id AND f.status = n.status
            AND f.event_id = n.event_id);
    RETURN NULL;
END $$;
CREATE TRIGGER outbox_one_event_per_final_state AFTER INSERT ON outbox
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_record_final_states();

CREATE FUNCTION onecharge_rfc3339(t timestamptz) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
        || COALESCE('.' || NULLIF(rtrim(to_char(t AT TIME ZONE 'UTC', 'US'), '0'), ''), '')
        || 'Z'
$$;
