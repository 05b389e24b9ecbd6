ALTER TABLE attempt_transitions ADD CONSTRAINT attempt_transitions_payment_attempt_id_fkey
    FOREIGN KEY (payment_attempt_id) REFERENCES payment_attempts ON DELETE RESTRICT;
ALTER TABLE gateway_calls ADD CONSTRAINT gateway_calls_payment_attempt_id_fkey
    FOREIGN KEY (payment_attempt_id) REFERENCES payment_attempts ON DELETE RESTRICT;
ALTER TABLE outbox ADD CONSTRAINT outbox_payment_attempt_id_fkey
    FOREIGN KEY (payment_attempt_id) REFERENCES payment_attempts ON DELETE RESTRICT;
