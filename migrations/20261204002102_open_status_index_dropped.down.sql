-- no-transaction
CREATE INDEX CONCURRENTLY IF NOT EXISTS payment_attempts_open_status_created_idx
    ON payment_attempts (status, created_at DESC)
    WHERE status NOT IN ('in_flight', 'succeeded', 'declined');
