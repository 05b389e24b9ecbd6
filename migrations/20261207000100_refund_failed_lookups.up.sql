-- Why (issue 51, decision 231): a refund counted every lookup on the failure schedule, so a
-- refund the gateway kept `pending` for half a day went to a person after one failed lookup.
-- Charges count failed lookups apart (`payment_attempts.reconcile_checks`): a lookup that
-- finds the refund still processing restarts the count, and the processing time is measured
-- from the last send, never from a count. `lookups` stays the number of lookups made (what
-- `refunds show` prints); `failed_lookups` is the position on `reconciler.schedule`.
--
-- Online: a column with a constant default is a change of the catalogue only (no rewrite),
-- after waiting at most 5 s for the writers' transactions.
SET LOCAL lock_timeout = '5s';

ALTER TABLE refunds
    ADD COLUMN failed_lookups integer NOT NULL DEFAULT 0 CHECK (failed_lookups >= 0);
