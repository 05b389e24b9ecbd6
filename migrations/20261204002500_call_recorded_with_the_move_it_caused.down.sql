-- Every call carried by a move becomes a gateway_calls row of its own again, under the id
-- it took when it was recorded (so an attempt's calls keep their order); then the view and
-- the columns go.
SET LOCAL lock_timeout = '5s';

INSERT INTO gateway_calls (id, payment_attempt_id, operation, idempotency_key, try_number,
        lease_token, started_at, finished_at, http_status, outcome, gateway_charge_id, error)
    SELECT call_id, payment_attempt_id, call_operation, call_idempotency_key,
           call_try_number, call_lease_token, call_started_at, call_finished_at,
           call_http_status, call_outcome, call_gateway_charge_id, call_error
    FROM attempt_transitions
    WHERE call_id IS NOT NULL;

DROP VIEW gateway_call_records;
ALTER TABLE attempt_transitions
    DROP COLUMN call_id,
    DROP COLUMN call_operation,
    DROP COLUMN call_idempotency_key,
    DROP COLUMN call_try_number,
    DROP COLUMN call_lease_token,
    DROP COLUMN call_started_at,
    DROP COLUMN call_finished_at,
    DROP COLUMN call_http_status,
    DROP COLUMN call_outcome,
    DROP COLUMN call_gateway_charge_id,
    DROP COLUMN call_error;
