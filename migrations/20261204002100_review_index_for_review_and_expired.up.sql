-- no-transaction
-- Why (issue 38, decision 215): `payment_attempts_open_status_created_idx` (decision 173)
-- took an entry for every attempt intake wrote, its `pending` version, although pending
-- attempts have an index of their own (`payment_attempts_pending_due_idx`, the claim's), as
-- unknown ones do (`…_unknown_due_idx`) and in-flight ones (`…_in_flight_lease_idx`). This
-- index holds only the two states no other index finds: attempts waiting for a person
-- (`needs_review`) and those intake recorded as `expired`. A §3 charge now puts no entry in
-- it. Built CONCURRENTLY (writers go on); the next migration checks it is valid and the one
-- after drops the old index.
CREATE INDEX CONCURRENTLY IF NOT EXISTS payment_attempts_review_expired_created_idx
    ON payment_attempts (status, created_at DESC)
    WHERE status IN ('needs_review', 'expired');
