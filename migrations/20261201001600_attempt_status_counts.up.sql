-- Why: the overview, `GET /api/stats`, `attempts stats` and the /metrics refresher (every 5 s
-- in every admin process) counted attempts per status with `count(*) … GROUP BY status`, a
-- scan of the whole status index: 1.9–3.4 s at 10 million attempts, and payment_attempts
-- only grows. The database now keeps the counts itself, exactly (an operator acts on
-- "needs_review: 3"), in the transaction of every write, without a hot row:
--
-- * attempt_status_counts holds the folded counts, one row per status;
-- * attempt_status_count_deltas is append-only and has no key: each statement that changes
--   payment_attempts appends one row per status whose count it changed (+n / −n), so
--   concurrent writers never wait on each other's counter row and cannot deadlock on one;
-- * the count of a status is its folded count plus its deltas, read in one statement (one
--   snapshot, so exact and consistent); folding moves the deltas into the counts in one
--   transaction (store::attempt_counts, decision 91).
--
-- The triggers are statement-level with transition tables: an intake batch (one INSERT …
-- UNNEST) or a settlement batch adds one delta per status touched, not one per row. An
-- UPDATE's delta is, per status, the rows after minus the rows before: rows whose status did
-- not change cancel out, and nothing depends on a key that an UPDATE could change.
-- TRUNCATE (which fires no DELETE trigger) empties the counts with the table.
--
-- The backfill is exact: the LOCK below (SHARE ROW EXCLUSIVE, the lock CREATE TRIGGER takes
-- anyway) waits for the writers in progress and keeps every writer of payment_attempts out
-- until this migration commits, so each row is counted either by the backfill (written
-- before) or by a trigger (written after), never by both or neither. Writers (intake, the
-- executor) wait for the backfill's one scan of the status index.

LOCK TABLE payment_attempts IN SHARE ROW EXCLUSIVE MODE;

CREATE TABLE attempt_status_counts (
    status text PRIMARY KEY,
    n      bigint NOT NULL
);

-- Rows live from a write until the next fold (seconds): vacuumed often, whatever the
-- server's scale factor, so readers do not scan dead rows.
CREATE TABLE attempt_status_count_deltas (
    status text   NOT NULL,
    n      bigint NOT NULL
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000,
        autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 10000);

CREATE FUNCTION attempt_status_count_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO attempt_status_count_deltas (status, n)
    SELECT status, count(*) FROM inserted_rows GROUP BY status;
    RETURN NULL;
END $$;

CREATE FUNCTION attempt_status_count_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO attempt_status_count_deltas (status, n)
    SELECT status, sum(n) FROM (
        SELECT status, 1 AS n FROM new_rows
        UNION ALL
        SELECT status, -1 FROM old_rows
    ) moved
    GROUP BY status
    HAVING sum(n) <> 0;
    RETURN NULL;
END $$;

CREATE FUNCTION attempt_status_count_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO attempt_status_count_deltas (status, n)
    SELECT status, -count(*) FROM deleted_rows GROUP BY status;
    RETURN NULL;
END $$;

CREATE FUNCTION attempt_status_count_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE attempt_status_counts, attempt_status_count_deltas;
    RETURN NULL;
END $$;

CREATE TRIGGER attempt_status_count_inserted AFTER INSERT ON payment_attempts
    REFERENCING NEW TABLE AS inserted_rows
    FOR EACH STATEMENT EXECUTE FUNCTION attempt_status_count_inserted();
CREATE TRIGGER attempt_status_count_updated AFTER UPDATE ON payment_attempts
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION attempt_status_count_updated();
CREATE TRIGGER attempt_status_count_deleted AFTER DELETE ON payment_attempts
    REFERENCING OLD TABLE AS deleted_rows
    FOR EACH STATEMENT EXECUTE FUNCTION attempt_status_count_deleted();
CREATE TRIGGER attempt_status_count_truncated AFTER TRUNCATE ON payment_attempts
    FOR EACH STATEMENT EXECUTE FUNCTION attempt_status_count_truncated();

INSERT INTO attempt_status_counts (status, n)
SELECT status, count(*) FROM payment_attempts GROUP BY status;
