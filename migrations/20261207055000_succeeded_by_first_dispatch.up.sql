-- no-transaction
-- Why (issue 55, decision 244): the sweep's last step looks for the succeeded attempts of
-- its window that no listed record names (`unlisted_succeeded`), by `first_dispatched_at`
-- and `updated_at`, neither of them indexed: each sweep walked the whole ledger in
-- `payment_attempt_id` order, which lengthened the compare step a stalled sweep depends on.
-- This index finds the window's succeeded attempts by when they were first sent, in the
-- order the step pages them (`first_dispatched_at`, then the id); only succeeded attempts
-- take an entry. Built CONCURRENTLY (writers go on); the next migration checks it is valid.
CREATE INDEX CONCURRENTLY IF NOT EXISTS payment_attempts_succeeded_dispatched_idx
    ON payment_attempts (first_dispatched_at, payment_attempt_id)
    WHERE status = 'succeeded';
