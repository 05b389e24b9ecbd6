//! The rules every migration after the baseline follows, so that `onecharge setup` migrates a
//! running installation without stopping its writers (docs/operations.md, "Schema
//! migrations", §27; decision 261). The baseline (`migrations/20261129000001_baseline.up.sql`)
//! runs once on an empty database and is exempt; every later `migrations/*.sql` is read as
//! text here:
//!
//! - it has a down migration, and starts by saying why (a comment);
//! - an index of a table the migration did not create is built and dropped `CONCURRENTLY`,
//!   in a migration marked `-- no-transaction` that holds that one statement (PostgreSQL runs
//!   the statements of one query in one transaction, where `CONCURRENTLY` is refused); a
//!   partitioned table's, which PostgreSQL cannot build or drop concurrently, is built
//!   `ON ONLY` the parent (its months' built concurrently before) and dropped plainly, after
//!   a `lock_timeout`;
//! - a migration that locks a table it did not create (`ALTER TABLE`, `CREATE TRIGGER`,
//!   `DROP TABLE`, `LOCK`, …) sets `lock_timeout` (`SET LOCAL lock_timeout = '5s'`) before,
//!   so that it fails and can run again rather than queue every writer behind it;
//! - a `CHECK` or foreign key added to such a table is added `NOT VALID` (validated by a
//!   later migration, which takes no lock that blocks writers), and no column of it changes
//!   its type (a rewrite under an exclusive lock).
//!
//! No database: this binary reads only the files. Each rule is also checked against a
//! migration that breaks it ([`the_rules_refuse_what_would_stop_the_writers`]).

use std::collections::BTreeSet;
use std::path::Path;

/// The first migration: the schema of the first release, applied to an empty database.
const BASELINE: &str = "20261129000001_baseline";

/// The partitioned tables, whose indexes PostgreSQL cannot build or drop `CONCURRENTLY`: an
/// index of one is made on each month `CONCURRENTLY`, then on the parent `ON ONLY` and
/// attached, and dropped plainly, each under a `lock_timeout`.
const PARTITIONED: &[&str] = &["attempt_transitions", "gateway_calls", "outbox"];

/// A migration as the rules read it: its statements, whether it is marked
/// `-- no-transaction`, and whether it starts by saying why.
struct Migration {
    name: String,
    no_transaction: bool,
    starts_with_why: bool,
    statements: Vec<String>,
}

impl Migration {
    fn parse(name: &str, text: &str) -> Self {
        let first = text.lines().next().unwrap_or_default().trim();
        let no_transaction = first == "-- no-transaction";
        let after_marker = text
            .lines()
            .skip(usize::from(no_transaction))
            .find(|l| !l.trim().is_empty())
            .unwrap_or_default();
        Self {
            name: name.to_owned(),
            no_transaction,
            starts_with_why: after_marker.trim_start().starts_with("--"),
            statements: statements(text),
        }
    }
}

/// Splits SQL into statements: `--` and `/* */` comments dropped, quoted text and
/// dollar-quoted bodies kept whole (a function's `;` ends nothing), words in upper case
/// outside them, whitespace collapsed.
fn statements(sql: &str) -> Vec<String> {
    let chars: Vec<char> = sql.chars().collect();
    let mut out = Vec::new();
    let mut current = String::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '-' && next == Some('-') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            current.push(' ');
        } else if c == '/' && next == Some('*') {
            i += 2;
            while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                i += 1;
            }
            i += 2;
            current.push(' ');
        } else if c == '\'' || c == '"' {
            current.push(c);
            i += 1;
            while i < chars.len() {
                current.push(chars[i]);
                if chars[i] == c {
                    break;
                }
                i += 1;
            }
            i += 1;
        } else if c == '$' {
            // $tag$ … $tag$
            let tag_end =
                (i + 1..chars.len()).find(|&j| !(chars[j].is_alphanumeric() || chars[j] == '_'));
            match tag_end {
                Some(j) if chars[j] == '$' => {
                    let tag: String = chars[i..=j].iter().collect();
                    let rest: String = chars[j + 1..].iter().collect();
                    let close = rest.find(&tag).map_or(rest.len(), |k| k + tag.len());
                    current.push_str(&tag);
                    current.push_str(" … ");
                    current.push_str(&tag);
                    i = j + 1 + rest[..close].chars().count();
                }
                _ => {
                    current.push(c);
                    i += 1;
                }
            }
        } else if c == ';' {
            push_statement(&mut out, &current);
            current.clear();
            i += 1;
        } else {
            current.push(if c.is_whitespace() {
                ' '
            } else {
                c.to_ascii_uppercase()
            });
            i += 1;
        }
    }
    push_statement(&mut out, &current);
    out
}

fn push_statement(out: &mut Vec<String>, text: &str) {
    let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if !collapsed.is_empty() {
        out.push(collapsed);
    }
}

/// The word after `prefix` in `statement` (a table's name), skipping the optional words.
fn name_after(statement: &str, prefix: &str) -> Option<String> {
    let rest = statement.split_once(prefix)?.1;
    rest.split_whitespace()
        .find(|w| !matches!(*w, "IF" | "NOT" | "EXISTS" | "ONLY" | "CONCURRENTLY"))
        .map(|w| {
            w.trim_matches('"')
                .trim_start_matches("PUBLIC.")
                .split('(')
                .next()
                .unwrap_or_default()
                .to_ascii_lowercase()
        })
}

/// The table a statement locks when it is not one the migration created, if any.
fn locks_table(statement: &str) -> Option<String> {
    let prefixes = [
        "ALTER TABLE ",
        "DROP TABLE ",
        "LOCK TABLE ",
        "LOCK ",
        "TRUNCATE TABLE ",
        "TRUNCATE ",
        "VACUUM FULL ",
        "CLUSTER ",
    ];
    for prefix in prefixes {
        if statement.starts_with(prefix) {
            return name_after(statement, prefix);
        }
    }
    if statement.starts_with("CREATE TRIGGER ")
        || statement.starts_with("CREATE OR REPLACE TRIGGER ")
        || statement.starts_with("DROP TRIGGER ")
        || statement.starts_with("CREATE RULE ")
        || statement.starts_with("CREATE POLICY ")
    {
        return name_after(statement, " ON ");
    }
    None
}

/// What `migration` does that would stop or queue the writers of a running installation.
fn broken_rules(migration: &Migration, has_down: bool) -> Vec<String> {
    let mut broken = Vec::new();
    let mut say = |what: String| broken.push(format!("{}: {what}", migration.name));
    if !has_down {
        say("has no down migration".into());
    }
    if !migration.starts_with_why {
        say("does not start with a comment saying why".into());
    }
    let created: BTreeSet<String> = migration
        .statements
        .iter()
        .filter(|s| s.starts_with("CREATE TABLE ") || s.starts_with("CREATE UNLOGGED TABLE "))
        .filter_map(|s| name_after(s, " TABLE "))
        .collect();
    let existing = |table: &str| !created.contains(table);
    let mut lock_timeout_set = false;
    for statement in &migration.statements {
        if statement.starts_with("SET LOCAL LOCK_TIMEOUT")
            || statement.starts_with("SET LOCK_TIMEOUT")
        {
            lock_timeout_set = true;
        }
        let index_on = if statement.starts_with("CREATE INDEX ")
            || statement.starts_with("CREATE UNIQUE INDEX ")
        {
            name_after(statement, " ON ")
        } else {
            None
        };
        let concurrently = statement.contains(" CONCURRENTLY ");
        if let Some(table) = index_on.as_deref().filter(|t| existing(t)) {
            let on_only_partitioned =
                statement.contains(" ON ONLY ") && PARTITIONED.contains(&table);
            if on_only_partitioned && !lock_timeout_set {
                say(format!(
                    "indexes the partitioned {table} before setting lock_timeout: `{statement}`"
                ));
            } else if !concurrently && !on_only_partitioned {
                let how = if PARTITIONED.contains(&table) {
                    " (partitioned: each month's CONCURRENTLY, then ON ONLY the parent and ATTACH)"
                } else {
                    ""
                };
                say(format!(
                    "builds an index of {table} without CONCURRENTLY{how}: `{statement}`"
                ));
            }
        }
        if statement.starts_with("DROP INDEX ") && !concurrently && !lock_timeout_set {
            say(format!(
                "drops an index without CONCURRENTLY (or, a partitioned table's, after setting lock_timeout): `{statement}`"
            ));
        }
        if concurrently && (!migration.no_transaction || migration.statements.len() != 1) {
            say(format!(
                "runs `{statement}` beside other statements or in a transaction: a CONCURRENTLY statement is alone in a migration marked `-- no-transaction`"
            ));
        }
        if let Some(table) = locks_table(statement).filter(|t| existing(t)) {
            if !lock_timeout_set {
                say(format!(
                    "locks {table} before setting lock_timeout (`SET LOCAL lock_timeout = '5s';` first): `{statement}`"
                ));
            }
            let adds_check_or_key = statement.contains(" ADD CONSTRAINT ")
                && (statement.contains(" CHECK ")
                    || statement.contains(" CHECK(")
                    || statement.contains(" FOREIGN KEY"));
            let adds_reference =
                statement.contains(" ADD COLUMN ") && statement.contains(" REFERENCES ");
            if (adds_check_or_key && !statement.contains(" NOT VALID")) || adds_reference {
                say(format!(
                    "adds a constraint to {table} that scans it under the lock: add it NOT VALID, VALIDATE it in a later migration: `{statement}`"
                ));
            }
            if statement.contains(" ALTER COLUMN ")
                && (statement.contains(" TYPE ") || statement.contains(" SET DATA TYPE "))
            {
                say(format!("changes a column type of {table}, a rewrite under an exclusive lock: `{statement}`"));
            }
        }
    }
    broken
}

/// Every migration file, by name without `.up.sql`, with its text and whether it has a down.
fn migrations(dir: &Path) -> Vec<(String, String, bool)> {
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    files
        .iter()
        .filter_map(|f| f.strip_suffix(".up.sql"))
        .map(|name| {
            let text = std::fs::read_to_string(dir.join(format!("{name}.up.sql"))).unwrap();
            let has_down = files.contains(&format!("{name}.down.sql"));
            (name.to_owned(), text, has_down)
        })
        .collect()
}

#[test]
fn every_migration_after_the_baseline_follows_the_online_rules() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
    let all = migrations(&dir);
    assert_eq!(
        all.first().map(|m| m.0.as_str()),
        Some(BASELINE),
        "the baseline is the first migration; a later one sorts after it"
    );
    assert!(
        std::fs::read_dir(&dir).unwrap().all(|e| {
            let n = e.unwrap().file_name();
            let n = n.to_string_lossy();
            n.ends_with(".up.sql") || n.ends_with(".down.sql")
        }),
        "migrations/ holds only *.up.sql and *.down.sql"
    );
    let broken: Vec<String> = all
        .iter()
        .skip(1)
        .flat_map(|(name, text, has_down)| broken_rules(&Migration::parse(name, text), *has_down))
        .collect();
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn the_rules_refuse_what_would_stop_the_writers() {
    // (migration text, what the rules say of it: a part of each complaint, none for a good one)
    let table: &[(&str, &[&str])] = &[
        (
            "-- no-transaction\n-- Why: searched by order.\nCREATE INDEX CONCURRENTLY IF NOT EXISTS a_idx ON payment_attempts (order_id);",
            &[],
        ),
        (
            "-- Why: a new table, its index and its trigger, all made here.\nCREATE TABLE t (id bigint, note text);\nCREATE INDEX t_idx ON t (note);\nCREATE TRIGGER t_trg AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION f();",
            &[],
        ),
        (
            "-- Why.\nSET LOCAL lock_timeout = '5s';\nALTER TABLE refunds ADD COLUMN note text;\nALTER TABLE refunds ADD CONSTRAINT refunds_note_check CHECK (length(note) <= 100) NOT VALID;",
            &[],
        ),
        (
            "-- Why: a function's body may say anything; it ends at its dollar quote.\nCREATE FUNCTION f() RETURNS void LANGUAGE plpgsql AS $$ BEGIN ALTER TABLE x ADD COLUMN y int; END $$;",
            &[],
        ),
        (
            "-- Why.\nCREATE INDEX a_idx ON payment_attempts (order_id);",
            &["builds an index of payment_attempts without CONCURRENTLY"],
        ),
        (
            "-- Why.\nDROP INDEX a_idx;",
            &["drops an index without CONCURRENTLY"],
        ),
        (
            "-- Why: PostgreSQL drops a partitioned index only plainly.\nSET LOCAL lock_timeout = '5s';\nDROP INDEX outbox_x_idx;",
            &[],
        ),
        (
            "-- Why: the months' indexes were built concurrently before.\nSET LOCAL lock_timeout = '5s';\nCREATE INDEX outbox_x_idx ON ONLY outbox (subject);\nALTER INDEX outbox_x_idx ATTACH PARTITION outbox_default_subject_idx;",
            &[],
        ),
        (
            "-- Why.\nCREATE INDEX outbox_x_idx ON ONLY outbox (subject);",
            &["indexes the partitioned outbox before setting lock_timeout"],
        ),
        (
            "-- Why.\nSET LOCAL lock_timeout = '5s';\nCREATE INDEX outbox_x_idx ON outbox (subject);",
            &["builds an index of outbox without CONCURRENTLY"],
        ),
        (
            "-- Why: ONLY makes no difference to a table that is not partitioned.\nSET LOCAL lock_timeout = '5s';\nCREATE INDEX r_idx ON ONLY refunds (reason);",
            &["builds an index of refunds without CONCURRENTLY"],
        ),
        (
            "-- Why.\nCREATE INDEX CONCURRENTLY a_idx ON payment_attempts (order_id);",
            &["alone in a migration marked `-- no-transaction`"],
        ),
        (
            "-- no-transaction\n-- Why.\nCREATE INDEX CONCURRENTLY a_idx ON outbox_unpublished (id);\nDROP INDEX CONCURRENTLY b_idx;",
            &["alone in a migration", "alone in a migration"],
        ),
        (
            "-- Why.\nALTER TABLE payment_attempts ADD COLUMN note text;",
            &["locks payment_attempts before setting lock_timeout"],
        ),
        (
            "-- Why.\nCREATE TRIGGER x AFTER INSERT ON outbox FOR EACH STATEMENT EXECUTE FUNCTION f();",
            &["locks outbox before setting lock_timeout"],
        ),
        (
            "-- Why.\nSET LOCAL lock_timeout = '5s';\nALTER TABLE refunds ADD CONSTRAINT c CHECK (tries < 100);",
            &["add it NOT VALID"],
        ),
        (
            "-- Why.\nSET LOCAL lock_timeout = '5s';\nALTER TABLE refunds ADD COLUMN attempt uuid REFERENCES payment_attempts;",
            &["add it NOT VALID"],
        ),
        (
            "-- Why.\nSET LOCAL lock_timeout = '5s';\nALTER TABLE refunds ALTER COLUMN tries TYPE bigint;",
            &["changes a column type of refunds"],
        ),
        ("SET LOCAL lock_timeout = '5s';", &["does not start with a comment saying why"]),
    ];
    for (text, expected) in table {
        let broken = broken_rules(&Migration::parse("m", text), true);
        assert_eq!(broken.len(), expected.len(), "{text}\n{broken:#?}");
        for (complaint, part) in broken.iter().zip(expected.iter()) {
            assert!(
                complaint.contains(part),
                "{text}\n{complaint}\nshould say {part}"
            );
        }
    }
    assert_eq!(
        broken_rules(&Migration::parse("m", "-- Why.\nSELECT 1;"), false),
        ["m: has no down migration"]
    );
}
