-- Why (decision 244): a CREATE INDEX CONCURRENTLY that failed half-way (cancelled, the
-- server restarted) leaves an INVALID index, which `IF NOT EXISTS` would then take for
-- built. If this fails: `DROP INDEX CONCURRENTLY payment_attempts_succeeded_dispatched_idx;`
-- and `DELETE FROM _sqlx_migrations WHERE version = 20261207055000;`, then run `onecharge
-- setup` again.
DO $$
BEGIN
    IF NOT (SELECT i.indisvalid FROM pg_index i
            WHERE i.indexrelid = 'payment_attempts_succeeded_dispatched_idx'::regclass) THEN
        RAISE EXCEPTION 'payment_attempts_succeeded_dispatched_idx is not valid (an interrupted CREATE INDEX CONCURRENTLY): drop it and run the migration 20261207055000 again';
    END IF;
END $$;
