DROP INDEX IF EXISTS payment_attempts_created_idx;
DROP TABLE IF EXISTS operator_audit;
