-- no-transaction
-- Why (decision 173): replaced by payment_attempts_open_status_created_idx. Dropped
-- CONCURRENTLY: it waits for the transactions using payment_attempts instead of blocking
-- them.
DROP INDEX CONCURRENTLY IF EXISTS payment_attempts_status_created_idx;
