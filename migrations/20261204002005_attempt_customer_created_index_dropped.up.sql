-- no-transaction
-- Why (decision 214): replaced by attempt_search's index, which takes one entry per charge
-- instead of one per version. Dropped CONCURRENTLY: it waits for the transactions using
-- payment_attempts instead of blocking them.
DROP INDEX CONCURRENTLY IF EXISTS payment_attempts_customer_created_idx;
