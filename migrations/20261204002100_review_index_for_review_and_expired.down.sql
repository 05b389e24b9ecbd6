-- no-transaction
DROP INDEX CONCURRENTLY IF EXISTS payment_attempts_review_expired_created_idx;
