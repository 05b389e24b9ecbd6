-- Why: `serve` runs as a runtime role that cannot change the schema (docs/decisions.md 160);
-- only `onecharge setup`, as the schema's owner, migrates. Two things `serve` does need an
-- owner's rights all the same:
--
-- * history retention (the `purge` role) creates, detaches and drops the month partitions
--   of attempt_transitions, gateway_calls and outbox (migration …_partitioned_history), and
--   only a table's owner may attach, detach or drop;
-- * the sweep refreshes the planner's statistics of reconciliation_sweep_records once it has
--   read the gateway's list, and ANALYZE by anyone but the owner is skipped with a warning,
--   leaving each batch of the comparison planned as a scan of every record.
--
-- Each step becomes a function that runs with its owner's rights (SECURITY DEFINER) and does
-- that one step and nothing else: a month function takes one of the three history tables by
-- name and a partition named `<table>_pYYYYMM`, and refuses anything else; a drop refuses a
-- month that is still attached, so the runtime role can end only what retention detached.
-- None of them lets the runtime role do more than it can already do with rows (it may
-- delete history; it may not drop payment_attempts). Their search_path is this schema
-- then pg_temp, so a temporary table of the caller never stands in for a history table.
-- EXECUTE is revoked from PUBLIC: the grants of deploy/postgres/runtime-grants.sql give it
-- to the runtime role.

CREATE FUNCTION onecharge_history_month_checked(parent text, partition text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF parent IS NULL OR parent NOT IN ('attempt_transitions', 'gateway_calls', 'outbox') THEN
        RAISE EXCEPTION 'onecharge: % is not a history table', parent
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF partition IS NOT NULL AND partition !~ ('^' || parent || '_p[0-9]{6}$') THEN
        RAISE EXCEPTION 'onecharge: % is not a month partition of %', partition, parent
            USING ERRCODE = 'insufficient_privilege';
    END IF;
END $$;

-- Grants on `partition` every privilege that someone other than the owner holds on
-- `parent`, so that a role granted the table reads a partition by its own name too
-- (retention counts and copies a month by its name). Called by the functions below only.
CREATE FUNCTION onecharge_history_grant_as_parent(parent text, partition text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    granted record;
BEGIN
    FOR granted IN
        SELECT acl.grantee, acl.privilege_type
        FROM pg_class c, aclexplode(c.relacl) acl
        WHERE c.oid = parent::regclass AND acl.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT %s ON %I TO %s', granted.privilege_type, partition,
            CASE WHEN granted.grantee = 0 THEN 'PUBLIC'
                 ELSE quote_ident(pg_get_userbyid(granted.grantee)) END);
    END LOOP;
END $$;

-- The DEFAULT partition of `parent`, created when missing.
CREATE FUNCTION onecharge_history_ensure_default(parent text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    PERFORM onecharge_history_month_checked(parent, NULL);
    IF to_regclass(quote_ident(parent || '_default')) IS NULL THEN
        EXECUTE format('CREATE TABLE %I PARTITION OF %I DEFAULT', parent || '_default', parent);
        PERFORM onecharge_history_grant_as_parent(parent, parent || '_default');
    END IF;
END $$;

-- Creates the month `partition` of `parent` for [from_, to_), moves into it the rows DEFAULT
-- holds for that range, then attaches it (filled before it is attached, so PostgreSQL never
-- refuses the range because DEFAULT holds rows of it); returns how many rows moved. The new
-- table gets the privileges its parent has, so a role granted the parent reads the month
-- directly too.
CREATE FUNCTION onecharge_history_create_month(
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

-- Detaches the month `partition` from `parent`, under the caller's lock_timeout.
CREATE FUNCTION onecharge_history_detach_month(parent text, partition text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    PERFORM onecharge_history_month_checked(parent, partition);
    EXECUTE format('ALTER TABLE %I DETACH PARTITION %I', parent, partition);
END $$;

-- Drops the month `partition` of `parent` once it is detached; an attached one is refused.
CREATE FUNCTION onecharge_history_drop_month(parent text, partition text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    PERFORM onecharge_history_month_checked(parent, partition);
    IF EXISTS (SELECT 1 FROM pg_class WHERE oid = to_regclass(quote_ident(partition))
               AND relispartition) THEN
        RAISE EXCEPTION 'onecharge: % is still attached to %: detach it first', partition, parent
            USING ERRCODE = 'object_in_use';
    END IF;
    EXECUTE format('DROP TABLE IF EXISTS %I', partition);
END $$;

-- ANALYZE reconciliation_sweep_records, as its owner.
CREATE FUNCTION onecharge_analyze_sweep_records() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    ANALYZE reconciliation_sweep_records;
END $$;

DO $$
DECLARE
    signature text;
BEGIN
    FOREACH signature IN ARRAY ARRAY[
        'onecharge_history_month_checked(text, text)',
        'onecharge_history_grant_as_parent(text, text)',
        'onecharge_history_ensure_default(text)',
        'onecharge_history_create_month(text, text, timestamptz, timestamptz)',
        'onecharge_history_detach_month(text, text)',
        'onecharge_history_drop_month(text, text)',
        'onecharge_analyze_sweep_records()'
    ] LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', signature, current_schema());
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', signature);
    END LOOP;
END $$;
