-- no-transaction
-- Why (issue 54, decision 265): at most one open pause per scope and currency (no currency
-- counts as one value), so that a second identical pause is refused by the database, never
-- by a read first, while pauses of other scopes or currencies open beside it. Built
-- CONCURRENTLY (a pause or a claim goes on meanwhile); 20261207150002 checks it is valid.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS fleet_pauses_one_open_per_scope
    ON fleet_pauses (scope, coalesce(currency, '')) WHERE resumed_at IS NULL;
