-- A sweep reads every page of a shared account, onecharge's records and everyone else's
-- (issue 35): it says how many it saw and how many it skipped as not onecharge's, beside
-- `records`, the ones it kept and compared. Added with defaults, so a running older
-- instance's INSERT and UPDATE (which name neither) go on working while this one rolls out.
ALTER TABLE reconciliation_sweeps
    ADD COLUMN records_seen    bigint NOT NULL DEFAULT 0,
    ADD COLUMN records_skipped bigint NOT NULL DEFAULT 0;
COMMENT ON COLUMN reconciliation_sweeps.records IS
    'records kept and compared: onecharge''s, with an outcome';
