-- Why (issue 38, decision 221): a settlement that a gateway call caused wrote the call's
-- evidence (a gateway_calls row and its index entry) and the move (an attempt_transitions
-- row and its index entry) for the same attempt in the same statement: after decision 220,
-- four of a §3 charge's 27.9 WAL records. The move's row now holds the call that caused it
-- (the call_* columns, the call's id taken from gateway_calls' own sequence, so calls keep
-- their order), and the view gateway_call_records lists every call as gateway_calls did:
-- its rows, and the calls carried by a move. A call that moved nothing (a result the fence
-- refused, a lookup that settled nothing, Stripe's create, a refund's call, a cancel, the
-- sweep's list) stays a row of gateway_calls.
--
-- Online, with attempts in flight: nullable columns without a default, a change of the
-- catalogue only (ACCESS EXCLUSIVE on each month of attempt_transitions for that moment,
-- after waiting at most 5 s for the writers' transactions; if it cannot have the locks in
-- that time the migration fails and `onecharge setup` can simply run again). Nothing is
-- copied: every call written before stays a row of gateway_calls, listed by the view. During
-- a rolling upgrade an instance of the previous build keeps writing its calls as rows, and
-- reads calls from gateway_calls alone: until it is replaced, its `attempts show` and its
-- latency chart miss the calls this build carried on moves (the attempt's state, its
-- history and its events are whole).
SET LOCAL lock_timeout = '5s';

ALTER TABLE attempt_transitions
    ADD COLUMN call_id bigint,
    ADD COLUMN call_operation text,
    ADD COLUMN call_idempotency_key text,
    ADD COLUMN call_try_number integer,
    ADD COLUMN call_lease_token bigint,
    ADD COLUMN call_started_at timestamptz,
    ADD COLUMN call_finished_at timestamptz,
    ADD COLUMN call_http_status integer,
    ADD COLUMN call_outcome text,
    ADD COLUMN call_gateway_charge_id text,
    ADD COLUMN call_error text;
COMMENT ON COLUMN attempt_transitions.call_id IS
    'When set, this row also records the gateway call that caused its move: the call''s id, taken from gateway_calls_id_seq, and its evidence in the other call_* columns, as a gateway_calls row would hold them (decision 221)';

CREATE VIEW gateway_call_records AS
    SELECT id, payment_attempt_id, operation, idempotency_key, try_number, lease_token,
           started_at, finished_at, http_status, outcome, gateway_charge_id, error
    FROM gateway_calls
    UNION ALL
    SELECT call_id, payment_attempt_id, call_operation, call_idempotency_key,
           call_try_number, call_lease_token, call_started_at, call_finished_at,
           call_http_status, call_outcome, call_gateway_charge_id, call_error
    FROM attempt_transitions
    WHERE call_id IS NOT NULL;
COMMENT ON VIEW gateway_call_records IS
    'Every gateway call, in the order of id: the rows of gateway_calls and the calls carried by the move they caused in attempt_transitions (decision 221)';
