-- no-transaction
DROP INDEX CONCURRENTLY IF EXISTS payment_attempts_succeeded_dispatched_idx;
