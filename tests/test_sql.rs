//! SQL in the tests sits in their support, not in their bodies (issue 53): a reader or a
//! writer of `tests/it/support/` holds each statement once, under a name from the contract
//! (`h.last_transition(id)`, `h.rename_table(..)`), so a test body says what it asserts and a
//! change of the schema is one edit.
//!
//! Every `tests/**/*.rs` file outside `tests/it/support/` is read as text, comments left out,
//! and each string literal (plain, byte or raw) whose text starts, after optional whitespace,
//! with an SQL keyword in capitals ([`KEYWORDS`]) is counted. The count may not exceed
//! [`BUDGET`]. What stays is SQL that is the subject of its test: the statements a role must
//! be refused, the statements whose plan is checked, the migration rules' own reading of
//! statements, the races and locks a test stages by hand. No database, no broker: this
//! binary needs only the sources.
//!
//! The count is the one of `grep -rEo '"\s*(SELECT|…|EXPLAIN)\b' tests --include=*.rs | grep -v
//! tests/it/support/ | wc -l`, but for comments, which it leaves out, and a literal whose
//! statement starts on the next line, which a grep of one line misses and this counts.

use std::collections::BTreeMap;
use std::path::Path;

#[path = "rust_source/mod.rs"]
mod rust_source;

use rust_source::rust_files;

/// How many SQL string literals the test bodies may hold. Lower it when the count falls;
/// never raise it without a reason written beside it (a new test whose subject is SQL).
const BUDGET: usize = 80;

/// The words an SQL statement starts with, written in lower case here so that this file holds
/// none of them in capitals itself.
const KEYWORDS: &[&str] = &[
    "select", "update", "insert", "delete", "with", "alter", "create", "drop", "set", "truncate",
    "grant", "revoke", "lock", "begin", "explain",
];

#[test]
fn test_bodies_hold_no_more_sql_than_the_budget() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let support = root.join("tests/it/support");
    let mut per_file = BTreeMap::new();
    // The service's tests and the demo's (which include the same harness).
    let bodies = ["tests", "demo/tests"]
        .iter()
        .flat_map(|dir| rust_files(&root.join(dir)));
    for file in bodies {
        if file.starts_with(&support) {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let n = sql_literals(&text);
        if n > 0 {
            let relative = file.strip_prefix(root).unwrap().display().to_string();
            per_file.insert(relative, n);
        }
    }
    let total: usize = per_file.values().sum();
    let mut by_count: Vec<_> = per_file.iter().collect();
    by_count.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let listing: Vec<String> = by_count
        .iter()
        .map(|(file, n)| format!("{n:>4} {file}"))
        .collect();
    println!(
        "{total} SQL literals in test bodies:\n{}",
        listing.join("\n")
    );
    assert!(
        total <= BUDGET,
        "{total} SQL string literals in test bodies, over the budget of {BUDGET}: give the \
         statement a name in tests/it/support/ (a reader or a writer of `Records`) and call \
         it\n{}",
        listing.join("\n")
    );
}

/// The checker itself, on a snippet: plain, byte and raw strings counted, leading
/// whitespace skipped, a keyword only as a whole word and in capitals, nothing in comments.
#[test]
fn the_checker_counts_sql_literals_and_nothing_in_comments() {
    let snippet = r##"
        let a = "KW count(*) FROM t";
        let b = r#"
            KW count(*) FROM t"#;
        let c = b"KW 1";
        // "KW in a line comment"
        /* "KW in a block /* nested */ comment" */
        let d = "KWED is one word";
        let e = "a KW in the middle";
        let f = "kw in lower case";
        let g = ('"', "KW after a quote character");
    "##
    .replace("KW", &KEYWORDS[0].to_uppercase());
    assert_eq!(sql_literals(&snippet), 4);
}

/// How many string literals of `text`, a Rust file, start with an SQL keyword.
fn sql_literals(text: &str) -> usize {
    rust_source::lex(text)
        .literals
        .iter()
        .filter(|literal| starts_with_keyword(literal))
        .count()
}

/// Whether `literal` starts, after optional whitespace, with a keyword of [`KEYWORDS`] in
/// capitals, followed by no letter, digit or underscore.
fn starts_with_keyword(literal: &str) -> bool {
    let text = literal.trim_start();
    KEYWORDS.iter().any(|keyword| {
        let keyword = keyword.to_uppercase();
        text.strip_prefix(&keyword).is_some_and(|rest| {
            !rest
                .chars()
                .next()
                .is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
    })
}
