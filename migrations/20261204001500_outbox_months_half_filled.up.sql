-- Why (issue 38, decision 171): the relay marks an event published with a HOT update, which
-- needs room for the new row version on the event's own page, so the outbox's months are
-- filled to 50 % (migration …_outbox_publication_queue set it on the months that existed).
-- Retention makes new months and the DEFAULT partition through the owner's functions of
-- migration …_owner_steps_for_the_runtime_role (decision 160); they now give an outbox
-- month the same fillfactor. The other history tables are never updated and stay full.
-- Online: replacing a function takes no table lock; only months made from now on change.

-- The storage parameters of a new month of `parent`.
CREATE FUNCTION onecharge_history_month_storage(parent text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN parent = 'outbox' THEN ' WITH (fillfactor = 50)' ELSE '' END
$$;

CREATE OR REPLACE FUNCTION onecharge_history_ensure_default(parent text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    PERFORM onecharge_history_month_checked(parent, NULL);
    IF to_regclass(quote_ident(parent || '_default')) IS NULL THEN
        EXECUTE format('CREATE TABLE %I PARTITION OF %I DEFAULT%s', parent || '_default', parent,
            onecharge_history_month_storage(parent));
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
    EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)%s',
        partition, parent, onecharge_history_month_storage(parent));
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
        'onecharge_history_month_storage(text)',
        'onecharge_history_ensure_default(text)',
        'onecharge_history_create_month(text, text, timestamptz, timestamptz)'
    ] LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', signature, current_schema());
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', signature);
    END LOOP;
END $$;
