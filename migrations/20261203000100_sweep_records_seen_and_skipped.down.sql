ALTER TABLE reconciliation_sweeps DROP COLUMN records_seen, DROP COLUMN records_skipped;
COMMENT ON COLUMN reconciliation_sweeps.records IS NULL;
