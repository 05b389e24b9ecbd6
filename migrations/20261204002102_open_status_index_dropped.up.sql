-- no-transaction
-- Why (decision 215): replaced by payment_attempts_review_expired_created_idx and the
-- pending, unknown and in-flight attempts' own indexes. Dropped CONCURRENTLY: it waits for
-- the transactions using payment_attempts instead of blocking them.
DROP INDEX CONCURRENTLY IF EXISTS payment_attempts_open_status_created_idx;
