-- The owner's functions as migration …_owner_steps_for_the_runtime_role made them: new
-- months filled whole again (the months made meanwhile keep their fillfactor).
CREATE OR REPLACE FUNCTION onecharge_history_ensure_default(parent text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    PERFORM onecharge_history_month_checked(parent, NULL);
    IF to_regclass(quote_ident(parent || '_default')) IS NULL THEN
        EXECUTE format('CREATE TABLE %I PARTITION OF %I DEFAULT', parent || '_default', parent);
        PERFORM onecharge_history_grant_as_parent(parent, parent || '_default');
    END IF;
END $$;
CREATE OR REPLACE FUNCTION onecharge_history_create_month(
    parent text, partition text, from_ timestamptz, to_ timestamptz
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    key text;
    moved bigint;
BEGIN
    PERFORM onecharge_history_month_checked(parent, partition);
    SELECT a.attname INTO STRICT key
    FROM pg_partitioned_table p
    JOIN pg_attribute a ON a.attrelid = p.partrelid AND a.attnum = p.partattrs[0]
    WHERE p.partrelid = parent::regclass;
    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
        partition, parent);
    EXECUTE format(
        'WITH moved AS (DELETE FROM %I WHERE %I >= $1 AND %I < $2 RETURNING *)
         INSERT INTO %I SELECT * FROM moved',
        parent || '_default', key, key, partition) USING from_, to_;
    GET DIAGNOSTICS moved = ROW_COUNT;
    EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
        parent, partition, from_, to_);
    PERFORM onecharge_history_grant_as_parent(parent, partition);
    RETURN moved;
END $$;

DO $$
DECLARE
    signature text;
BEGIN
    FOREACH signature IN ARRAY ARRAY[
        'onecharge_history_ensure_default(text)',
        'onecharge_history_create_month(text, text, timestamptz, timestamptz)'
    ] LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', signature, current_schema());
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', signature);
    END LOOP;
END $$;
DROP FUNCTION onecharge_history_month_storage(text);
