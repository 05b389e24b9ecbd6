-- The counts are derived from payment_attempts: dropping them loses nothing; the readers of
-- the build before this migration count the table again.
DROP TRIGGER attempt_status_count_inserted ON payment_attempts;
DROP TRIGGER attempt_status_count_updated ON payment_attempts;
DROP TRIGGER attempt_status_count_deleted ON payment_attempts;
DROP TRIGGER attempt_status_count_truncated ON payment_attempts;
DROP FUNCTION attempt_status_count_inserted();
DROP FUNCTION attempt_status_count_updated();
DROP FUNCTION attempt_status_count_deleted();
DROP FUNCTION attempt_status_count_truncated();
DROP TABLE attempt_status_count_deltas;
DROP TABLE attempt_status_counts;
