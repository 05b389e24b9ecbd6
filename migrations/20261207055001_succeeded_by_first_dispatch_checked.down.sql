-- Nothing to take back: the up migration only checks.
SELECT 1;
