-- Why: an event JetStream refuses every time (larger than the stream's max_msg_size, a subject
-- no stream stores) was claimed first on every relay step and starved the events behind it.
-- A refused row now waits for its own next try, backed off by its publish_attempts; NULL means
-- due now (every row written before this migration, and every row not yet refused).
ALTER TABLE outbox ADD COLUMN next_attempt_at timestamptz;
