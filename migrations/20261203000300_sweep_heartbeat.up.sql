-- A sweep's liveness and its window's exclusivity (issue 35, decision 129).
--
-- `heartbeat_at` moves with every page a running sweep reads. A new sweep ends any sweep
-- whose heartbeat (or start, for a row from before) is older than ten minutes as
-- abandoned (its instance died), and deletes the records of ended sweeps only: a sweep that
-- is still reading keeps its records however long ago it started.
ALTER TABLE reconciliation_sweeps ADD COLUMN heartbeat_at timestamptz;

-- Rows an older build left unfinished and long silent are ended here, so that the
-- constraint below can be made; a row started in the last ten minutes may still be running.
UPDATE reconciliation_sweeps
   SET finished_at = now(),
       error = 'abandoned: found unfinished when sweeps got heartbeats (its instance stopped mid-run)'
 WHERE finished_at IS NULL AND started_at < now() - interval '10 minutes';

-- Two instances never sweep overlapping windows at once: the second is refused by the
-- database, whatever the timing. Ended sweeps are outside the constraint.
ALTER TABLE reconciliation_sweeps ADD CONSTRAINT reconciliation_sweeps_one_running_per_window
    EXCLUDE USING gist (tstzrange(window_from, window_to) WITH &&) WHERE (finished_at IS NULL);
