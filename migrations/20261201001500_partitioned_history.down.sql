-- Back to plain tables: every row is copied back (kept and DEFAULT rows included); what
-- retention dropped stays dropped.
CREATE FUNCTION pg_temp.unpartition(parent text, pkey text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('ALTER TABLE %I RENAME TO %I', parent, parent || '_partitioned');
    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
        parent, parent || '_partitioned');
    EXECUTE format('INSERT INTO %I SELECT * FROM %I', parent, parent || '_partitioned');
    EXECUTE format('DROP TABLE %I CASCADE', parent || '_partitioned');
    EXECUTE format('ALTER TABLE %I ADD PRIMARY KEY (%s)', parent, pkey);
    EXECUTE format('ALTER TABLE %I ADD FOREIGN KEY (payment_attempt_id) REFERENCES payment_attempts ON DELETE RESTRICT', parent);
END $$;

ALTER SEQUENCE attempt_transitions_id_seq OWNED BY NONE;
ALTER SEQUENCE gateway_calls_id_seq OWNED BY NONE;
SELECT pg_temp.unpartition('attempt_transitions', 'id');
SELECT pg_temp.unpartition('gateway_calls', 'id');
SELECT pg_temp.unpartition('outbox', 'event_id');
ALTER SEQUENCE attempt_transitions_id_seq OWNED BY attempt_transitions.id;
ALTER SEQUENCE gateway_calls_id_seq OWNED BY gateway_calls.id;
CREATE INDEX attempt_transitions_attempt_idx ON attempt_transitions (payment_attempt_id, id);
CREATE INDEX gateway_calls_attempt_idx ON gateway_calls (payment_attempt_id, id);
CREATE INDEX outbox_unpublished_idx ON outbox (created_at) WHERE published_at IS NULL;
DROP TABLE outbox_final_states;
DROP FUNCTION outbox_record_final_state();
CREATE UNIQUE INDEX outbox_one_event_per_final_state
    ON outbox (payment_attempt_id, status)
    WHERE status IN ('succeeded', 'declined', 'expired');
