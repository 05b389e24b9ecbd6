-- A narrower pause becomes a fleet-wide one once its scope is gone: resume the narrower
-- pauses first (`onecharge fleet status`), or the previous release reads them as pauses of
-- everything.
SET LOCAL lock_timeout = '5s';
ALTER TABLE fleet_pauses DROP COLUMN IF EXISTS currency, DROP COLUMN IF EXISTS scope;
