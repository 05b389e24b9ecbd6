-- Why (decision 216): replaced by outbox_final_states and outbox_attempt_events. The outbox
-- is partitioned, and a partitioned index cannot be dropped CONCURRENTLY: the drop takes
-- ACCESS EXCLUSIVE on the outbox and its months for the moment it lasts (no data is
-- read), after waiting at most 5 s for the relay's and the writers' transactions; if it
-- cannot have the lock in that time the migration fails and `onecharge setup` can simply
-- run again.
SET LOCAL lock_timeout = '5s';
DROP INDEX IF EXISTS outbox_attempt_idx;
