-- The runtime role of onecharge: every right that `onecharge serve` (all its roles), the
-- operator commands (`attempts`, `dlq`, `audit`, `findings`, `fleet`, `intake audit`,
-- `purge`, `reconcile`, `publish`) and the console need, and no right to change the schema.
-- Only `onecharge setup`, run as the schema's owner, migrates (docs/decisions/160-setup-migrates-as-the-owner-serve-only-checks.md;
-- docs/operations.md §23).
--
-- Run as the owner (or a superuser), once the role exists and the first `onecharge setup`
-- has made the tables:
--
--   psql "postgres://onecharge_owner@db:5432/onecharge" -v ON_ERROR_STOP=1 \
--     -v database=onecharge -v owner_role=onecharge_owner -v runtime_role=onecharge_runtime \
--     -f deploy/postgres/runtime-grants.sql
--
-- Every statement can run again and changes nothing the second time. The default privileges
-- at the end give the runtime role the tables, sequences and functions that later
-- migrations make, as long as `setup` runs as owner_role: nothing here needs running again
-- after an upgrade. A test (tests/it/least_privilege.rs) applies this file and runs the
-- pipeline, the operator commands and the purge as the role it grants.
--
-- The role is created by whoever manages your roles, with a password from your secret store:
--   CREATE ROLE onecharge_runtime LOGIN PASSWORD '…' NOSUPERUSER NOCREATEDB NOCREATEROLE;

-- Connect, and temporary tables: history retention notes the rows it keeps in one.
GRANT CONNECT, TEMPORARY ON DATABASE :"database" TO :"runtime_role";

-- Use the schema, never create in it. PostgreSQL 15 and later no longer let PUBLIC create in
-- `public`; the revoke makes older servers the same.
GRANT USAGE ON SCHEMA public TO :"runtime_role";
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
REVOKE CREATE ON SCHEMA public FROM :"runtime_role";

-- Rows of every table (history partitions included), never TRUNCATE, REFERENCES or TRIGGER.
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO :"runtime_role";
-- The migrations' own record is read (serve checks that the schema is current), never
-- written.
REVOKE INSERT, UPDATE, DELETE ON TABLE public._sqlx_migrations FROM :"runtime_role";

-- The audit trail of every person's action is append-only: a compromised runtime can add
-- to it and read it, never rewrite or delete who did what.
REVOKE UPDATE, DELETE ON TABLE public.operator_audit FROM :"runtime_role";

-- Ids from sequences (nextval), never setval.
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO :"runtime_role";

-- The functions onecharge calls: the owner's steps of history retention and the sweep's
-- ANALYZE (the baseline migration's owner steps, decision 160), which PUBLIC may not call.
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO :"runtime_role";

-- What later migrations (run by owner_role) create gets the same rights.
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner_role" IN SCHEMA public
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO :"runtime_role";
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner_role" IN SCHEMA public
    GRANT USAGE, SELECT ON SEQUENCES TO :"runtime_role";
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner_role" IN SCHEMA public
    GRANT EXECUTE ON FUNCTIONS TO :"runtime_role";
