-- Why (decision 214): the attempts' own search indexes are dropped next, and only when
-- every attempt can be found without them. If this fails, an attempt has no search row:
-- run the previous migration's statement again (`DELETE FROM _sqlx_migrations WHERE version
-- = 20261204002001;`, then `onecharge setup`).
DO $$
DECLARE missing bigint;
BEGIN
    SELECT count(*) INTO missing FROM payment_attempts a
    WHERE NOT EXISTS (SELECT FROM attempt_search s
                      WHERE s.created_at = a.created_at
                        AND s.payment_attempt_id = a.payment_attempt_id);
    IF missing > 0 THEN
        RAISE EXCEPTION '% attempts have no row in attempt_search: run the migration 20261204002001 again', missing;
    END IF;
END $$;
