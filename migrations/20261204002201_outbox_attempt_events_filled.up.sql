-- Why (decision 216): the other events written before the previous migration get their row.
-- One pass over the outbox's months (a scan: minutes at tens of millions of events), in a
-- transaction that blocks no writer; rows the trigger wrote meanwhile are left as they are.
-- The old index serves the running instances until the next migration drops it.
INSERT INTO outbox_attempt_events (payment_attempt_id, event_id, created_at)
SELECT o.payment_attempt_id, o.event_id, o.created_at
FROM outbox o
WHERE o.payment_attempt_id IS NOT NULL
  AND o.status NOT IN ('succeeded', 'declined', 'expired')
ON CONFLICT DO NOTHING;
ANALYZE outbox_attempt_events;
