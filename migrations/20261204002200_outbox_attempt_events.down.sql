SET LOCAL lock_timeout = '5s';
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
DROP TRIGGER outbox_record_attempt_events ON outbox;
CREATE TRIGGER outbox_one_event_per_final_state AFTER INSERT ON outbox
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_record_final_states();
DROP FUNCTION outbox_record_attempt_events();
DROP TABLE outbox_attempt_events;
