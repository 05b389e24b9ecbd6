-- no-transaction
DROP INDEX CONCURRENTLY IF EXISTS fleet_pauses_one_open_per_scope;
