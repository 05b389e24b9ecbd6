-- Not online: the partial index is built again on every month under a SHARE lock (writers
-- of the outbox wait for the build). The outbox's own `published_at` was kept up to date
-- throughout, so nothing is lost with the queue.
CREATE INDEX outbox_unpublished_idx ON outbox (created_at) WHERE published_at IS NULL;
DROP TRIGGER outbox_queue_unpublished ON outbox;
DROP FUNCTION outbox_queue_unpublished();
DROP TABLE outbox_unpublished;
DO $$
DECLARE month regclass;
BEGIN
    FOR month IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'outbox'::regclass LOOP
        EXECUTE format('ALTER TABLE %s RESET (fillfactor)', month);
    END LOOP;
END $$;
