-- no-transaction
CREATE INDEX CONCURRENTLY IF NOT EXISTS payment_attempts_customer_created_idx ON payment_attempts (customer_id, created_at DESC);
