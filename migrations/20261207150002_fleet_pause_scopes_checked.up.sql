-- Why (issue 54, decision 265): a CREATE INDEX CONCURRENTLY that failed half-way leaves an
-- INVALID index, which `IF NOT EXISTS` would then take for built (decision 244). If this
-- fails: `DROP INDEX CONCURRENTLY fleet_pauses_one_open_per_scope;` and `DELETE FROM
-- _sqlx_migrations WHERE version = 20261207150001;`, then run `onecharge setup` again. The
-- two checks of 20261207150000 are validated here, under a lock that lets writers on.
DO $$
BEGIN
    IF NOT (SELECT i.indisvalid FROM pg_index i
            WHERE i.indexrelid = 'fleet_pauses_one_open_per_scope'::regclass) THEN
        RAISE EXCEPTION 'fleet_pauses_one_open_per_scope is not valid (an interrupted CREATE INDEX CONCURRENTLY): drop it and run the migration 20261207150001 again';
    END IF;
END $$;
SET LOCAL lock_timeout = '5s';
ALTER TABLE fleet_pauses VALIDATE CONSTRAINT fleet_pauses_scope_check;
ALTER TABLE fleet_pauses VALIDATE CONSTRAINT fleet_pauses_currency_check;
