//! Reading Rust sources as text, for the checks that hold `src` and `tests` to their rules
//! (`tests/layering.rs`, `tests/test_sql.rs`): one lexer that tells code from comments,
//! string literals and character literals, so both checks see a file the same way.
#![allow(dead_code)] // each check uses a part

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, sorted, so the listing is in a stable order.
pub fn rust_files(dir: &Path) -> Vec<PathBuf> {
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

/// A Rust file split into its code and its string literals.
pub struct Lexed {
    /// The text with comments, string literals and character literals blanked (newlines
    /// kept, so lines still count right).
    pub code: String,
    /// The text of every string literal (plain, byte or raw), in order, without its quotes.
    pub literals: Vec<String>,
}

/// `text` with comments, string literals and character literals blanked.
pub fn code_only(text: &str) -> String {
    lex(text).code
}

/// Splits `text` into [`Lexed`]'s code and string literals.
pub fn lex(text: &str) -> Lexed {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut literals = Vec::new();
    let blank = |out: &mut String, chars: &[char]| {
        for &c in chars {
            out.push(if c == '\n' { '\n' } else { ' ' });
        }
    };
    let mut i = 0;
    while i < chars.len() {
        let rest = &chars[i..];
        let previous_is_ident = i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
        if rest.starts_with(&['/', '/']) {
            let end = rest.iter().position(|&c| c == '\n').unwrap_or(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
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
            blank(&mut out, &rest[..end]);
            i += end;
        } else if let Some((prefix, hashes)) = raw_string_start(rest).filter(|_| !previous_is_ident)
        {
            let mut closing = vec!['"'];
            closing.extend(std::iter::repeat_n('#', hashes));
            let body = prefix + hashes + 1;
            let close = (body..rest.len())
                .find(|&k| rest[k..].starts_with(&closing))
                .unwrap_or(rest.len());
            literals.push(rest[body..close].iter().collect());
            let end = (close + closing.len()).min(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if c_is(rest, '"') || (!previous_is_ident && rest.starts_with(&['b', '"'])) {
            let open = if rest[0] == 'b' { 2 } else { 1 };
            let mut close = open;
            while close < rest.len() && rest[close] != '"' {
                close += if rest[close] == '\\' { 2 } else { 1 };
            }
            let close = close.min(rest.len());
            literals.push(rest[open..close].iter().collect());
            let end = (close + 1).min(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if c_is(rest, '\'') {
            // A character literal ('x', '\n', '\u{1F600}'), or else a lifetime ('a), kept.
            let end = if rest.get(1) == Some(&'\\') {
                (2..rest.len())
                    .find(|&k| rest[k] == '\'')
                    .map_or(1, |k| k + 1)
            } else if rest.get(2) == Some(&'\'') {
                3
            } else {
                0
            };
            if end == 0 {
                out.push('\'');
                i += 1;
            } else {
                blank(&mut out, &rest[..end]);
                i += end;
            }
        } else {
            out.push(rest[0]);
            i += 1;
        }
    }
    Lexed {
        code: out,
        literals,
    }
}

fn c_is(rest: &[char], c: char) -> bool {
    rest.first() == Some(&c)
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
