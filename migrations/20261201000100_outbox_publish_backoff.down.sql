ALTER TABLE outbox DROP COLUMN next_attempt_at;
