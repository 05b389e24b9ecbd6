-- Why (issue 38, decision 214): the three search indexes of payment_attempts (by time, by
-- order, by customer) took an entry for every version of every attempt, three per charge
-- (intake's insert, the claim, the settlement), though none of the columns they hold ever
-- changes after intake: an attempt's updates are never HOT (they change its state, which
-- other indexes read), and a version that is not HOT is written into every index. Six of a
-- §3 charge's 25 index entries, and their WAL records, were these indexes repeating what
-- they already held.
--
-- Now those three columns are copied, once, into a narrow table written only when an
-- attempt is inserted, and the search indexes are on it: one entry each per charge. The
-- searches (by order, by customer, by time) find attempt ids there and read each attempt by
-- its primary key. The copy is made by triggers, so whatever writes attempts (intake, an
-- instance of the previous build during a rolling upgrade, a tool, a person) keeps it true
-- in the same transaction: a statement trigger copies inserted attempts; a row trigger
-- fires only for an UPDATE that sets one of the three columns (onecharge's own updates
-- never do, so it costs them nothing) and a statement trigger for a DELETE (onecharge
-- deletes no attempt). The table grows with payment_attempts (about 90 bytes a row, with
-- its indexes' share).
--
-- Online, with attempts in flight: this migration creates the table, its indexes and the
-- triggers in one short transaction (CREATE TRIGGER takes SHARE ROW EXCLUSIVE on
-- payment_attempts: writers wait for the moment of the migration, at most 5 s). The next one
-- copies the attempts that existed before, without blocking writers; the one after checks
-- that every attempt has its row; then the old indexes are dropped CONCURRENTLY.
SET LOCAL lock_timeout = '5s';

CREATE TABLE attempt_search (
    payment_attempt_id uuid        NOT NULL,
    created_at         timestamptz NOT NULL,
    order_id           text        NOT NULL,
    customer_id        text        NOT NULL
);
COMMENT ON TABLE attempt_search IS
    'The columns operators search attempts by, which never change after intake: one row per payment_attempts row, written with it by a trigger and never updated (decision 214)';

-- Each index ends with the attempt id, so that a page of a search is read from the index
-- alone (the heap of this table is never needed) in the listing's order, ties included.
CREATE INDEX attempt_search_created_idx
    ON attempt_search (created_at DESC, payment_attempt_id DESC);
CREATE INDEX attempt_search_order_idx
    ON attempt_search (order_id, created_at DESC, payment_attempt_id DESC);
CREATE INDEX attempt_search_customer_idx
    ON attempt_search (customer_id, created_at DESC, payment_attempt_id DESC);

CREATE FUNCTION attempt_search_copy() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO attempt_search (payment_attempt_id, created_at, order_id, customer_id)
    SELECT n.payment_attempt_id, n.created_at, n.order_id, n.customer_id FROM new_attempts n;
    RETURN NULL;
END $$;
CREATE TRIGGER attempt_search_copy AFTER INSERT ON payment_attempts
    REFERENCING NEW TABLE AS new_attempts
    FOR EACH STATEMENT EXECUTE FUNCTION attempt_search_copy();

CREATE FUNCTION attempt_search_follow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE attempt_search
    SET payment_attempt_id = NEW.payment_attempt_id, created_at = NEW.created_at,
        order_id = NEW.order_id, customer_id = NEW.customer_id
    WHERE created_at = OLD.created_at AND payment_attempt_id = OLD.payment_attempt_id;
    RETURN NULL;
END $$;
CREATE TRIGGER attempt_search_follow
    AFTER UPDATE OF payment_attempt_id, created_at, order_id, customer_id ON payment_attempts
    FOR EACH ROW EXECUTE FUNCTION attempt_search_follow();

CREATE FUNCTION attempt_search_forget() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM attempt_search s USING old_attempts o
    WHERE s.created_at = o.created_at AND s.payment_attempt_id = o.payment_attempt_id;
    RETURN NULL;
END $$;
CREATE TRIGGER attempt_search_forget AFTER DELETE ON payment_attempts
    REFERENCING OLD TABLE AS old_attempts
    FOR EACH STATEMENT EXECUTE FUNCTION attempt_search_forget();
