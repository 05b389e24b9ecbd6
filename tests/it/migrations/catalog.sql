-- Everything a migration can make in the schema `public`, one line per object, in a fixed
-- order: what `tests/it/migrations.rs` compares with `baseline.catalog`. The month
-- partitions are named relative to the database's current month (M0, M1, M2), so the
-- description is the same whatever month it runs in. Run it in a session whose TimeZone is
-- UTC (partition bounds print in the session's zone). The catalogue's own artefacts of how
-- an object was made are left out: column numbers (a dropped column leaves a gap; the order
-- is kept), OIDs, and whether a partition's columns and constraints are its own or
-- inherited (a month `CREATE TABLE … PARTITION OF` makes and one `LIKE` + `ATTACH` makes
-- are the same table).
WITH months AS (
    SELECT k, to_char((date_trunc('month', now() AT TIME ZONE 'UTC') + make_interval(months => k)), 'YYYYMM') AS yyyymm,
           to_char((date_trunc('month', now() AT TIME ZONE 'UTC') + make_interval(months => k)), 'YYYY-MM-DD') AS day
    FROM generate_series(0, 3) AS k
),
rel AS (
    SELECT c.* FROM pg_class c
    WHERE c.relnamespace = 'public'::regnamespace AND c.relname <> '_sqlx_migrations'
      AND c.relname NOT LIKE '\_sqlx\_migrations%'
),
lines AS (
    -- tables, partitioned tables, views, sequences
    SELECT 'relation ' || c.relname || ' kind=' || c.relkind::text
        || ' persistence=' || c.relpersistence::text
        || ' options=' || coalesce(c.reloptions::text, '-')
        || ' replica_identity=' || c.relreplident::text
        || ' row_security=' || c.relrowsecurity
        || coalesce(' partition_key=' || pg_get_partkeydef(c.oid), '')
        || coalesce(' partition_of=' || (SELECT p.relname FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent
                                          WHERE i.inhrelid = c.oid), '')
        || coalesce(' bound=' || pg_get_expr(c.relpartbound, c.oid), '')
        || ' acl=' || coalesce(c.relacl::text, '-')
        || coalesce(' comment=' || obj_description(c.oid, 'pg_class'), '') AS line
    FROM rel c WHERE c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
    UNION ALL
    -- columns, in their order
    SELECT 'column ' || c.relname || '.' || lpad((row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum))::text, 2, '0')
        || ' ' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
        || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
        || coalesce(' default=' || pg_get_expr(d.adbin, d.adrelid), '')
        || CASE WHEN a.attidentity <> '' THEN ' identity=' || a.attidentity::text ELSE '' END
        || CASE WHEN a.attgenerated <> '' THEN ' generated=' || a.attgenerated::text ELSE '' END
        || CASE WHEN a.attcollation <> 0 AND a.attcollation <> t.typcollation
                THEN ' collation=' || a.attcollation::regcollation ELSE '' END
        || ' storage=' || a.attstorage::text
        || CASE WHEN a.attcompression <> '' THEN ' compression=' || a.attcompression::text ELSE '' END
        || CASE WHEN a.attstattarget <> -1 THEN ' statistics=' || a.attstattarget ELSE '' END
        || coalesce(' options=' || (SELECT array_agg(o ORDER BY o)::text FROM unnest(a.attoptions) o
                                    WHERE o NOT LIKE 'pg\_attver=%'), '')
        || coalesce(' acl=' || a.attacl::text, '')
        || coalesce(' comment=' || col_description(c.oid, a.attnum), '')
    FROM rel c
    JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
    JOIN pg_type t ON t.oid = a.atttypid
    LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
    WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f')
    UNION ALL
    -- constraints of tables (checks, keys, exclusions, foreign keys)
    SELECT 'constraint ' || c.relname || '.' || k.conname || ' ' || k.contype::text
        || ' ' || pg_get_constraintdef(k.oid)
        || CASE WHEN k.convalidated THEN '' ELSE ' (not validated)' END
        || CASE WHEN k.connoinherit THEN ' (no inherit)' ELSE '' END
        || coalesce(' comment=' || obj_description(k.oid, 'pg_constraint'), '')
    FROM pg_constraint k JOIN rel c ON c.oid = k.conrelid
    UNION ALL
    -- indexes, with their storage options and validity
    SELECT 'index ' || c.relname || '.' || i.relname || ' ' || pg_get_indexdef(i.oid)
        || ' valid=' || x.indisvalid
        || coalesce(' options=' || i.reloptions::text, '')
        || coalesce(' partition_of=' || (SELECT p.relname FROM pg_inherits h JOIN pg_class p ON p.oid = h.inhparent
                                          WHERE h.inhrelid = i.oid), '')
        || coalesce(' comment=' || obj_description(i.oid, 'pg_class'), '')
    FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN rel c ON c.oid = x.indrelid
    UNION ALL
    -- sequences
    SELECT 'sequence ' || c.relname || ' ' || format_type(s.seqtypid, NULL)
        || ' start=' || s.seqstart || ' increment=' || s.seqincrement
        || ' min=' || s.seqmin || ' max=' || s.seqmax || ' cache=' || s.seqcache
        || ' cycle=' || s.seqcycle
        || coalesce(' owned_by=' || (SELECT t.relname || '.' || a.attname
                                     FROM pg_depend dp JOIN pg_class t ON t.oid = dp.refobjid
                                     JOIN pg_attribute a ON a.attrelid = dp.refobjid AND a.attnum = dp.refobjsubid
                                     WHERE dp.classid = 'pg_class'::regclass AND dp.objid = c.oid
                                       AND dp.refclassid = 'pg_class'::regclass
                                       AND dp.deptype IN ('a', 'i')), '')
    FROM pg_sequence s JOIN rel c ON c.oid = s.seqrelid
    UNION ALL
    -- views
    SELECT 'view ' || c.relname || ' ' || pg_get_viewdef(c.oid, true)
    FROM rel c WHERE c.relkind IN ('v', 'm')
    UNION ALL
    -- triggers (the ones a migration wrote; a partition's clone of a row trigger too)
    SELECT 'trigger ' || c.relname || '.' || g.tgname || ' ' || pg_get_triggerdef(g.oid, true)
        || ' enabled=' || g.tgenabled::text
    FROM pg_trigger g JOIN rel c ON c.oid = g.tgrelid
    WHERE NOT g.tgisinternal
    UNION ALL
    -- rules other than a view's own
    SELECT 'rule ' || r.tablename || '.' || r.rulename || ' ' || r.definition
    FROM pg_rules r WHERE r.schemaname = 'public'
    UNION ALL
    -- row security policies
    SELECT 'policy ' || p.tablename || '.' || p.policyname || ' ' || p.cmd || ' '
        || coalesce(p.qual, '-') || ' ' || coalesce(p.with_check, '-') || ' ' || p.roles::text
    FROM pg_policies p WHERE p.schemaname = 'public'
    UNION ALL
    -- functions: their whole definition (body, language, volatility, security, settings)
    -- and who may run them
    SELECT 'function ' || p.oid::regprocedure::text || ' acl=' || coalesce(p.proacl::text, '-')
        || coalesce(' comment=' || obj_description(p.oid, 'pg_proc'), '')
        || E'\n' || pg_get_functiondef(p.oid)
    FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace
    UNION ALL
    -- types of their own (enums, domains, composites, ranges)
    SELECT 'type ' || t.typname || ' ' || t.typtype::text
        || coalesce(' ' || (SELECT string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder)
                            FROM pg_enum e WHERE e.enumtypid = t.oid), '')
        || CASE WHEN t.typtype = 'd' THEN ' ' || format_type(t.typbasetype, t.typtypmod) ELSE '' END
    FROM pg_type t
    WHERE t.typnamespace = 'public'::regnamespace AND t.typtype IN ('e', 'd', 'r', 'm')
       OR (t.typnamespace = 'public'::regnamespace AND t.typtype = 'c'
           AND (SELECT relkind FROM pg_class WHERE oid = t.typrelid) = 'c')
    UNION ALL
    -- extended statistics
    SELECT 'statistics ' || s.stxname || ' ' || pg_get_statisticsobjdef(s.oid)
    FROM pg_statistic_ext s WHERE s.stxnamespace = 'public'::regnamespace
    UNION ALL
    -- extensions
    SELECT 'extension ' || e.extname FROM pg_extension e WHERE e.extname <> 'plpgsql'
    UNION ALL
    -- default privileges for objects made later
    SELECT 'default_privileges ' || pg_get_userbyid(d.defaclrole) || ' ' || d.defaclobjtype::text
        || ' ' || d.defaclacl::text
    FROM pg_default_acl d
    UNION ALL
    -- the rows a migration wrote, per table (partitions counted by their parent)
    SELECT 'rows ' || c.relname || ' '
        || (xpath('/row/n/text()',
                  query_to_xml(format('SELECT count(*) AS n FROM %I', c.relname), false, true, '')))[1]::text
    FROM rel c WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
)
SELECT line FROM (
    SELECT (
        SELECT replace(replace(
                   replace(replace(replace(replace(replace(replace(replace(replace(
                       l.line,
                       (SELECT yyyymm FROM months WHERE k = 0), 'M0'),
                       (SELECT yyyymm FROM months WHERE k = 1), 'M1'),
                       (SELECT yyyymm FROM months WHERE k = 2), 'M2'),
                       (SELECT yyyymm FROM months WHERE k = 3), 'M3'),
                       (SELECT day FROM months WHERE k = 0), 'M0-01'),
                       (SELECT day FROM months WHERE k = 1), 'M1-01'),
                       (SELECT day FROM months WHERE k = 2), 'M2-01'),
                       (SELECT day FROM months WHERE k = 3), 'M3-01'),
                   current_user || '=', 'OWNER='),
               '/' || current_user, '/OWNER')
    ) AS line
    FROM lines l
) normalized
ORDER BY line
