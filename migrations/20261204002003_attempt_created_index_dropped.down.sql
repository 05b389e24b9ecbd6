-- no-transaction
CREATE INDEX CONCURRENTLY IF NOT EXISTS payment_attempts_created_idx ON payment_attempts (created_at DESC, payment_attempt_id DESC);
