-- no-transaction
-- Fails while more than one pause is open: resume all but one first (`onecharge fleet
-- status`, `onecharge fleet resume --id N`). A failed attempt leaves an INVALID
-- fleet_pauses_one_open, which `IF NOT EXISTS` would take for built: `DROP INDEX
-- CONCURRENTLY fleet_pauses_one_open;` before running this again.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS fleet_pauses_one_open
    ON fleet_pauses ((true)) WHERE resumed_at IS NULL;
