-- Why (decision 215): a CREATE INDEX CONCURRENTLY that failed half-way (cancelled, the
-- server restarted) leaves an INVALID index, which `IF NOT EXISTS` would then take for
-- built; the old index is dropped next only when the new one serves. If this fails: `DROP
-- INDEX CONCURRENTLY payment_attempts_review_expired_created_idx;` and `DELETE FROM
-- _sqlx_migrations WHERE version = 20261204002100;`, then run `onecharge setup` again.
DO $$
BEGIN
    IF NOT (SELECT i.indisvalid FROM pg_index i
            WHERE i.indexrelid = 'payment_attempts_review_expired_created_idx'::regclass) THEN
        RAISE EXCEPTION 'payment_attempts_review_expired_created_idx is not valid (an interrupted CREATE INDEX CONCURRENTLY): drop it and run the migration 20261204002100 again';
    END IF;
END $$;
