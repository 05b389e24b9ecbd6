-- Why (issue 38, decision 170): every charge writes three transitions and a gateway call,
-- and each of those rows put one entry into its table's primary key `(id, at)` /
-- `(id, started_at)` — four B-tree entries per §3 charge (about one in nine of its index
-- entries) for keys no statement reads: every query of these tables finds its rows by
-- attempt (`…_attempt_idx`, `(payment_attempt_id, id)`: the timeline, the list's latest call,
-- the review chart), by time (`…_brin`: the overview's charts), or scans a month
-- (retention). Retention's one lookup by id, the copy of a month's kept rows while the
-- month is detached, now names the attempt too and uses `…_attempt_idx`
-- (store::retention). The ids stay: the sequence still numbers the rows, and the timeline
-- still orders by them.
--
-- What it costs an operator: tables without a primary key have no replica identity, so a
-- logical-replication publication that publishes deletes could not replicate the row-by-row
-- deletes retention makes in the DEFAULT partitions (months go whole, by DDL, which logical
-- replication does not carry). The DEFAULT partitions get REPLICA IDENTITY FULL here, which
-- costs nothing without wal_level = logical; the month partitions only ever receive inserts.
--
-- Online: dropping a constraint is a catalog change, but it needs ACCESS EXCLUSIVE on the
-- table and its partitions for a moment; writers queue behind it while it waits, so it
-- waits at most 5 s (then the migration fails and the instance's next start tries again).
SET LOCAL lock_timeout = '5s';
ALTER TABLE attempt_transitions DROP CONSTRAINT attempt_transitions_pkey;
ALTER TABLE gateway_calls DROP CONSTRAINT gateway_calls_pkey;
ALTER TABLE attempt_transitions_default REPLICA IDENTITY FULL;
ALTER TABLE gateway_calls_default REPLICA IDENTITY FULL;
