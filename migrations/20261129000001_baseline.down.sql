-- Takes the baseline back: drops everything it made (its month partitions go with their
-- tables, the sequences with the columns that own them), leaving an empty schema.
DROP VIEW gateway_call_records, attempt_history, attempt_open_claims;
DROP TABLE
    processed_messages, stream_audit_watermarks, intake_unrecorded_messages,
    payment_attempts, attempt_transitions, gateway_calls,
    attempt_search, attempt_status_counts, attempt_status_count_deltas,
    outbox, outbox_final_states, outbox_attempt_events, outbox_unpublished,
    refunds, refund_totals, refund_transitions, refund_final_events,
    stripe_webhook_events, gateway_object_checks, gateway_rate_buckets,
    reconciliation_sweeps, reconciliation_sweep_records, reconciliation_sweep_schedule,
    reconciliation_findings,
    operator_audit, console_sessions, fleet_pauses;
DROP FUNCTION
    onecharge_claim_entry(boolean, text, integer, bigint), onecharge_claim_written(),
    attempt_search_copy(), attempt_search_follow(), attempt_search_forget(),
    attempt_status_count_inserted(), attempt_status_count_updated(),
    attempt_status_count_deleted(), attempt_status_count_truncated(),
    outbox_record_attempt_events(), outbox_queue_unpublished(),
    onecharge_rfc3339(timestamptz),
    onecharge_history_month_checked(text, text), onecharge_history_grant_as_parent(text, text),
    onecharge_history_month_storage(text), onecharge_history_ensure_default(text),
    onecharge_history_create_month(text, text, timestamptz, timestamptz),
    onecharge_history_detach_month(text, text), onecharge_history_drop_month(text, text),
    onecharge_analyze_sweep_records();
