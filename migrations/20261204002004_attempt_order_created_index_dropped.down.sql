-- no-transaction
CREATE INDEX CONCURRENTLY IF NOT EXISTS payment_attempts_order_created_idx ON payment_attempts (order_id, created_at DESC);
