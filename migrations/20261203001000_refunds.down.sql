ALTER TABLE processed_messages DROP CONSTRAINT processed_messages_result_check;
ALTER TABLE processed_messages ADD CONSTRAINT processed_messages_result_check
    CHECK (result IN ('accepted', 'business_duplicate', 'stale')) NOT VALID;
ALTER TABLE gateway_calls DROP CONSTRAINT gateway_calls_operation_check;
ALTER TABLE gateway_calls ADD CONSTRAINT gateway_calls_operation_check
    CHECK (operation IN ('charge', 'lookup', 'prepare', 'cancel', 'list')) NOT VALID;
ALTER TABLE outbox DROP CONSTRAINT outbox_status_check;
ALTER TABLE outbox ADD CONSTRAINT outbox_status_check
    CHECK (status IN ('succeeded', 'declined', 'expired', 'needs_review', 'finding')) NOT VALID;
DROP TABLE refund_final_events;
DROP TABLE refund_transitions;
DROP TABLE refund_totals;
DROP TABLE refunds;
