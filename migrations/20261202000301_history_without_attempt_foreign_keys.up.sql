-- Why: dropping a history month deadlocked the writers (issue 23). The partitions of
-- attempt_transitions, gateway_calls and outbox carried foreign keys to payment_attempts, and
-- a foreign key lives on both tables: DETACH PARTITION creates the detached table's own
-- referential triggers on payment_attempts (SHARE ROW EXCLUSIVE on it) and DROP TABLE removes
-- them (ACCESS EXCLUSIVE on it), after the history table's own lock, while every writer
-- locks payment_attempts first and a history table second. Under load the retention job and
-- a writer waited on each other (40P01), and while the job waited, every writer and every
-- claim queued behind its lock on payment_attempts.
--
-- Without the foreign keys, retention locks only the history table it drops a month of, for
-- one short transaction (store::retention::drop_partition), and never payment_attempts. What
-- the keys guarded stays true by construction: every history row is written in the
-- transaction that creates or changes its attempt (the attempt row exists and is locked
-- then), and no code deletes an attempt (payment_attempts is the ledger; retention and purge
-- never touch it). Dropping a key takes ACCESS EXCLUSIVE on payment_attempts once, here.
ALTER TABLE attempt_transitions DROP CONSTRAINT attempt_transitions_payment_attempt_id_fkey;
ALTER TABLE gateway_calls DROP CONSTRAINT gateway_calls_payment_attempt_id_fkey;
ALTER TABLE outbox DROP CONSTRAINT outbox_payment_attempt_id_fkey;
