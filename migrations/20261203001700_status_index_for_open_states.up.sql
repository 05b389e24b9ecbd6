-- no-transaction
-- Why (issue 38, decision 173): `payment_attempts_status_created_idx (status, created_at)`
-- took an entry for every version of every attempt, three per charge (pending at intake,
-- in_flight at the claim, the outcome at the settlement), though its searches need only the
-- states an attempt waits in: the pending, the unknown and those in review (the stuck list,
-- the review queue, the gauges, a search by state). In-flight attempts are found by their
-- lease index and the settled outcomes by the time index, as the search by state already did
-- for `succeeded`. This index holds only the open states (every state but in_flight,
-- succeeded and declined): one entry per charge, at intake, none when it is claimed or
-- settled. Built CONCURRENTLY (writers go on); the next migration checks it is valid and the
-- one after drops the old index.
CREATE INDEX CONCURRENTLY IF NOT EXISTS payment_attempts_open_status_created_idx
    ON payment_attempts (status, created_at DESC)
    WHERE status NOT IN ('in_flight', 'succeeded', 'declined');
