-- no-transaction
-- Why (issue 54, decision 265): `fleet_pauses_one_open` allowed one open pause in all; a
-- charges-only pause and a refunds-only one (or two currencies) are open together now, one
-- per scope and currency by `fleet_pauses_one_open_per_scope`. Dropped CONCURRENTLY, so
-- that no claim (which reads the open pauses) waits behind it.
DROP INDEX CONCURRENTLY IF EXISTS fleet_pauses_one_open;
