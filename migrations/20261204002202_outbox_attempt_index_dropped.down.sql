SET LOCAL lock_timeout = '5s';
CREATE INDEX IF NOT EXISTS outbox_attempt_idx ON outbox (payment_attempt_id);
