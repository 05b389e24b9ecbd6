-- no-transaction
DROP INDEX CONCURRENTLY IF EXISTS payment_attempts_open_status_created_idx;
