-- Why (issue 38, decision 171): marking an event published was the costliest write of its
-- life. `outbox_unpublished_idx` (created_at) WHERE published_at IS NULL made `published_at`
-- an indexed column, so the relay's mark was never a HOT update: a new row version with an
-- entry in every index of the outbox (the primary key and `outbox_attempt_idx`), after a
-- row lock of its own for the claim — three index entries and two heap records per event
-- beside the insert, for a flag.
--
-- Now the events waiting for the relay are queued in a table of their own, one row per
-- insert statement into the outbox (at most 64 events a row), written by a statement
-- trigger like the final states': whatever inserts an event (a settlement, an operator's
-- resolution, intake's stale births, a finding, a refund) queues it in the same
-- transaction. The relay claims whole queue rows (FOR UPDATE SKIP LOCKED), publishes their
-- events and, after JetStream's acks, marks them published (a HOT update: `published_at` is
-- in no index now) and deletes the queue rows, in one transaction; an event that was not
-- acknowledged goes back into the queue as a row of its own, due when it may be tried
-- again. Per event: one index entry less at the insert, none at the mark, no row lock;
-- the queue's own row, lock and delete are shared by the statement's events.
--
-- Online, with attempts in flight: one transaction creates the queue and its trigger
-- (SHARE ROW EXCLUSIVE on the outbox, which holds back its writers for the moment of the
-- migration), queues every event not yet published (found through the old index), and
-- drops the old index (ACCESS EXCLUSIVE for a moment), waiting at most 5 s for each lock.
-- An instance of the previous build still running its relay during a rolling upgrade finds
-- unpublished events by scanning the outbox and marks them without touching the queue: the
-- new relay then finds their queue rows already published and deletes them; an event both
-- publish at once is one message on the stream (the same Nats-Msg-Id, JetStream's duplicate
-- window).
SET LOCAL lock_timeout = '5s';

CREATE TABLE outbox_unpublished (
    id              bigint        GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_ids       uuid[]        NOT NULL,
    created_ats     timestamptz[] NOT NULL,
    next_attempt_at timestamptz,
    CONSTRAINT outbox_unpublished_events_check
        CHECK (cardinality(event_ids) BETWEEN 1 AND 64
               AND cardinality(created_ats) = cardinality(event_ids))
);
COMMENT ON TABLE outbox_unpublished IS
    'Events waiting for the relay, by (event_ids[i], created_ats[i]) = the outbox key; a row is deleted when its events are published (decision 171)';

CREATE FUNCTION outbox_queue_unpublished() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outbox_unpublished (event_ids, created_ats)
    SELECT array_agg(e.event_id ORDER BY e.n), array_agg(e.created_at ORDER BY e.n)
    FROM (SELECT n.event_id, n.created_at,
                 row_number() OVER (ORDER BY n.created_at, n.event_id) - 1 AS n
          FROM new_events n
          WHERE n.published_at IS NULL) e
    GROUP BY e.n / 64
    ORDER BY e.n / 64;
    RETURN NULL;
END $$;
CREATE TRIGGER outbox_queue_unpublished AFTER INSERT ON outbox
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_queue_unpublished();

-- What is unpublished now: due events in rows of 64, oldest first; an event JetStream
-- refused keeps its own next try.
INSERT INTO outbox_unpublished (event_ids, created_ats)
SELECT array_agg(e.event_id ORDER BY e.n), array_agg(e.created_at ORDER BY e.n)
FROM (SELECT o.event_id, o.created_at,
             row_number() OVER (ORDER BY o.created_at, o.event_id) - 1 AS n
      FROM outbox o
      WHERE o.published_at IS NULL AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= now())) e
GROUP BY e.n / 64
ORDER BY e.n / 64;
INSERT INTO outbox_unpublished (event_ids, created_ats, next_attempt_at)
SELECT ARRAY[o.event_id], ARRAY[o.created_at], o.next_attempt_at
FROM outbox o
WHERE o.published_at IS NULL AND o.next_attempt_at > now()
ORDER BY o.created_at, o.event_id;

DROP INDEX outbox_unpublished_idx;

-- Room on each page for the mark's new row version (HOT only on the same page): the months
-- written from now on are filled to 50 %; retention makes new months the same way.
DO $$
DECLARE month regclass;
BEGIN
    FOR month IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'outbox'::regclass LOOP
        EXECUTE format('ALTER TABLE %s SET (fillfactor = 50)', month);
    END LOOP;
END $$;
