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
use std::path::{Path, PathBuf};

/// How many SQL string literals the test bodies may hold. Lower it when the count falls;
/// never raise it without a reason written beside it (a new test whose subject is SQL).
const BUDGET: usize = 125;

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
    for file in rust_files(&root.join("tests")) {
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
    string_literals(text)
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

/// Every `.rs` file under `dir`, sorted, so the listing is in a stable order.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// The text of every string literal of `text` (plain, byte or raw), in order; comments and
/// character literals are passed over.
fn string_literals(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut literals = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let rest = &chars[i..];
        let previous_is_ident = i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
        if rest.starts_with(&['/', '/']) {
            i += rest.iter().position(|&c| c == '\n').unwrap_or(rest.len());
        } else if rest.starts_with(&['/', '*']) {
            let mut nesting = 0;
            let mut end = 0;
            while end < rest.len() {
                if rest[end..].starts_with(&['/', '*']) {
                    nesting += 1;
                    end += 2;
                } else if rest[end..].starts_with(&['*', '/']) {
                    nesting -= 1;
                    end += 2;
                    if nesting == 0 {
                        break;
                    }
                } else {
                    end += 1;
                }
            }
            i += end;
        } else if !previous_is_ident && raw_string_start(rest).is_some() {
            let (prefix, hashes) = raw_string_start(rest).unwrap();
            let mut closing = vec!['"'];
            closing.extend(std::iter::repeat_n('#', hashes));
            let body = prefix + hashes + 1;
            let close = (body..rest.len())
                .find(|&k| rest[k..].starts_with(&closing))
                .unwrap_or(rest.len());
            literals.push(rest[body..close].iter().collect());
            i += (close + closing.len()).min(rest.len());
        } else if rest.first() == Some(&'"')
            || (!previous_is_ident && rest.starts_with(&['b', '"']))
        {
            let open = if rest[0] == 'b' { 2 } else { 1 };
            let mut end = open;
            while end < rest.len() && rest[end] != '"' {
                end += if rest[end] == '\\' { 2 } else { 1 };
            }
            let end = end.min(rest.len());
            literals.push(rest[open..end].iter().collect());
            i += (end + 1).min(rest.len());
        } else if rest.first() == Some(&'\'') {
            // A character literal ('x', '\n', '\u{1F600}'), or else a lifetime ('a), kept.
            let end = if rest.get(1) == Some(&'\\') {
                (2..rest.len())
                    .find(|&k| rest[k] == '\'')
                    .map_or(1, |k| k + 1)
            } else if rest.get(2) == Some(&'\'') {
                3
            } else {
                1
            };
            i += end;
        } else {
            i += 1;
        }
    }
    literals
}

/// At a raw string (`r"`, `r#"`, `br##"`, …): the prefix's length and the number of `#`.
fn raw_string_start(rest: &[char]) -> Option<(usize, usize)> {
    let prefix = if rest.starts_with(&['b', 'r']) {
        2
    } else if rest.starts_with(&['r']) {
        1
    } else {
        return None;
    };
    let hashes = rest[prefix..].iter().take_while(|&&c| c == '#').count();
    (rest.get(prefix + hashes) == Some(&'"')).then_some((prefix, hashes))
}
