DROP INDEX payment_attempts_gateway_object_idx;
DELETE FROM outbox WHERE status = 'finding';
ALTER TABLE outbox DROP CONSTRAINT outbox_status_check;
ALTER TABLE outbox ADD CONSTRAINT outbox_status_check
    CHECK (status IN ('succeeded', 'declined', 'expired', 'needs_review'));
DROP TABLE stripe_webhook_events;
