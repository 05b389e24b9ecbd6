DROP FUNCTION onecharge_rfc3339(timestamptz);
DROP TRIGGER outbox_one_event_per_final_state ON outbox;
DROP FUNCTION outbox_record_final_states();
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
