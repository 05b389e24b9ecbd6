-- Why (issue 38, decision 203): an attempt's row gets two new versions soon after intake
-- writes it (the claim, the settlement), and neither is HOT (they change indexed columns).
-- When the new version does not fit on the row's page it goes to another one, and
-- PostgreSQL first writes a row lock record for the old version: 1.77 such records per §3
-- charge with full pages. Pages filled to 70 % keep most new versions on their page (1.77
-- → 0.91 measured; 50 % would keep more, for twice the heap of a table that is never
-- purged: docs/performance.md, "What a charge writes").
--
-- Online: SET (fillfactor) takes SHARE UPDATE EXCLUSIVE (readers and writers go on; it
-- waits only for a running VACUUM or DDL, bounded by the lock timeout) and rewrites
-- nothing. It applies to pages written from now on: pages already full stay full until an
-- operator rewrites the table (pg_repack, or VACUUM FULL in a maintenance window), which
-- is not needed for settled attempts, whose rows are not updated again.
SET LOCAL lock_timeout = '5s';
ALTER TABLE payment_attempts SET (fillfactor = 70);
