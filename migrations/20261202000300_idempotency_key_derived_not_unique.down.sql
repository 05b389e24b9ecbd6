ALTER TABLE payment_attempts
    ADD CONSTRAINT payment_attempts_idempotency_key_key UNIQUE (idempotency_key);
DROP INDEX payment_attempts_idempotency_key_idx;
ALTER TABLE payment_attempts DROP CONSTRAINT payment_attempts_idempotency_key_derived;
