-- Why: intake inserts attempts with `ON CONFLICT (payment_attempt_id) DO NOTHING`, but
-- payment_attempts also had a second unique constraint, payment_attempts_idempotency_key_key,
-- which that arbiter does not cover. When two transactions insert the same attempt at the
-- same moment (a business duplicate right behind its original, on two instances), PostgreSQL
-- checks the non-arbiter unique index with an ordinary uniqueness check, waits for the first
-- transaction and raises 23505 instead of doing nothing; intake blamed class 23 on the
-- message and dead-lettered a valid duplicate (issue 23).
--
-- The key is not an independent value: it is derived from the attempt id alone
-- (IdempotencyKey::for_attempt, `onecharge-<id>`), so it is unique because the primary key
-- is. The CHECK below says exactly that, so the database still refuses a key that is not
-- the attempt's own, and uniqueness follows from the primary key — the one arbiter intake
-- names. A plain index keeps the operators' search by key (`attempts list
-- --idempotency-key`, the console filter) an index lookup.
ALTER TABLE payment_attempts
    ADD CONSTRAINT payment_attempts_idempotency_key_derived
    CHECK (idempotency_key = 'onecharge-' || payment_attempt_id::text) NOT VALID;
ALTER TABLE payment_attempts VALIDATE CONSTRAINT payment_attempts_idempotency_key_derived;
CREATE INDEX payment_attempts_idempotency_key_idx ON payment_attempts (idempotency_key);
ALTER TABLE payment_attempts DROP CONSTRAINT payment_attempts_idempotency_key_key;
