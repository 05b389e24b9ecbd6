-- Nothing to take back: the up migration only checks and validates.
SELECT 1;
