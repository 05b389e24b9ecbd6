//! The layering of `src`, checked rather than only drawn (`docs/ARCHITECTURE.md`):
//!
//! - the **domain** (`src/domain`) is the pure core: it imports nothing from the crate outside
//!   `crate::domain`;
//! - the **store** (`src/store`) reads and writes the domain's nouns for the roles above it: it
//!   imports no role (`intake`, `executor`, `reconciler`, `relay`, `operator`, `purge`) and no
//!   face or assembly (`http`, `cli`, `app`);
//! - the two **faces**, `http` and `cli`, import nothing from each other;
//! - the **gateway** and the **broker** (`src/gateway`, `src/broker`) never import the
//!   store: a client of the outside world never touches the database;
//! - **no working role imports another** (`intake`, `executor`, `reconciler`, `relay`,
//!   `purge`), nor the operators' faces (`operator`, `http`, `cli`) or the assembly: what
//!   two roles share sits below them (the domain, the store, the gateway). A refund's two
//!   halves live in `executor::refunds` and `reconciler::refunds` under the same rule;
//! - **what is stored is timed by the database**: the domain, the store, intake's recording,
//!   the executor and the reconciler never read the host's wall clock;
//! - **one name for one thing**: no public type name is defined twice in `src`;
//! - **the service links no test double**: the mock gateway is the demo's (`demo/`) and the
//!   tests', never a dependency of the library `serve` runs, and no feature brings it in.
//!
//! Every `src/**/*.rs` file is read as text: comments, strings and character literals are
//! blanked, then every path that starts at `crate::` or `super::` (in a `use` or inline,
//! grouped `use crate::{a, b::{c, d}}` included) is resolved to the top-level module it names.
//! A broken rule fails the test with the file, the line and the import. No database, no
//! broker: this binary needs only the sources.
//!
//! An import that breaks a rule today and is meant to go is listed in [`EXCEPTIONS`], with the
//! reason; the test also fails when an exception no longer matches anything, so the list only
//! shrinks.

use std::fmt;
use std::path::Path;

#[path = "rust_source/mod.rs"]
mod rust_source;

use rust_source::{code_only, rust_files};

/// The roles: each works on the domain's nouns through the store, so the store sits below them.
const ROLES: &[&str] = &[
    "intake",
    "executor",
    "reconciler",
    "relay",
    "operator",
    "purge",
];

/// The faces and the assembly of the running service: on top of everything.
const FACES_AND_ASSEMBLY: &[&str] = &["http", "cli", "app"];

/// Imports that break a rule today, as (file under `src/`, top-level module imported, why it
/// is still there). Each one is a debt: remove the line when the import goes.
const EXCEPTIONS: &[(&str, &str, &str)] = &[];

/// One layer's rule: which files it covers and which top-level modules they may not name.
struct Rule {
    /// The top-level module whose files the rule covers (`src/<layer>.rs`, `src/<layer>/**`).
    layer: &'static str,
    /// What the rule says, for the failure message.
    says: &'static str,
    /// Whether a path from `layer` into the top-level module `target` breaks the rule.
    forbids: fn(layer: &str, target: &str) -> bool,
}

const RULES: &[Rule] = &[
    Rule {
        layer: "domain",
        says: "the domain imports nothing from the crate outside `crate::domain`",
        forbids: |_, target| target != "domain",
    },
    Rule {
        layer: "store",
        says: "the store imports no role and no face",
        forbids: |_, target| ROLES.contains(&target) || FACES_AND_ASSEMBLY.contains(&target),
    },
    Rule {
        layer: "http",
        says: "the HTTP face imports nothing from the command line",
        forbids: |_, target| target == "cli",
    },
    Rule {
        layer: "cli",
        says: "the command line imports nothing from the HTTP face",
        forbids: |_, target| target == "http",
    },
    Rule {
        layer: "gateway",
        says: "the gateway never imports the store",
        forbids: |_, target| target == "store",
    },
    Rule {
        layer: "broker",
        says: "the broker never imports the store",
        forbids: |_, target| target == "store",
    },
    Rule {
        layer: "intake",
        says: "no working role imports another role, a face or the assembly",
        forbids: another_role,
    },
    Rule {
        layer: "executor",
        says: "no working role imports another role, a face or the assembly",
        forbids: another_role,
    },
    Rule {
        layer: "reconciler",
        says: "no working role imports another role, a face or the assembly",
        forbids: another_role,
    },
    Rule {
        layer: "relay",
        says: "no working role imports another role, a face or the assembly",
        forbids: another_role,
    },
    Rule {
        layer: "purge",
        says: "no working role imports another role, a face or the assembly",
        forbids: another_role,
    },
];

/// A working role's path into another role (a working one or the operators' face), a face
/// or the assembly.
fn another_role(layer: &str, target: &str) -> bool {
    target != layer && (ROLES.contains(&target) || FACES_AND_ASSEMBLY.contains(&target))
}

#[test]
fn the_domain_the_store_and_the_faces_import_only_downwards() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut broken = Vec::new();
    let mut excused = vec![false; EXCEPTIONS.len()];
    for file in rust_files(&src) {
        let relative = relative_to(&src, &file);
        let Some(module) = module_path(&relative) else {
            continue; // a binary's own crate root (`main.rs`, `bin/`): `crate::` is not the library
        };
        let rules: Vec<&Rule> = RULES
            .iter()
            .filter(|r| module.first().map(String::as_str) == Some(r.layer))
            .collect();
        if rules.is_empty() {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for (import, rule) in imports(&text, &module)
            .into_iter()
            .flat_map(|import| rules.iter().map(move |rule| (import.clone(), *rule)))
        {
            let target = import.path.first().map(String::as_str).unwrap_or("");
            if !(rule.forbids)(rule.layer, target) {
                continue;
            }
            if let Some(i) = EXCEPTIONS
                .iter()
                .position(|(f, t, _)| *f == relative && *t == target)
            {
                excused[i] = true;
                continue;
            }
            broken.push(format!(
                "src/{relative}:{}: `{import}`: {}",
                import.line, rule.says
            ));
        }
    }
    for ((file, target, _), used) in EXCEPTIONS.iter().zip(excused) {
        if !used {
            broken.push(format!(
                "src/{file} no longer imports `crate::{target}`: remove its line from EXCEPTIONS"
            ));
        }
    }
    assert!(
        broken.is_empty(),
        "the layering of src is broken ({} finding(s)):\n{}",
        broken.len(),
        broken.join("\n")
    );
}

/// Where what is stored is timed: by the database's `now()`, never by the host's wall clock
/// (decision 024). The domain, the store, intake's recording, the executor and the
/// reconciler never read the wall clock themselves; the executor and the reconciler read
/// `crate::clock` for in-memory timing only (the gateway's health), which a test moves.
const TIMED_BY_THE_DATABASE: &[&str] = &[
    "domain/",
    "store/",
    "intake/mod.rs",
    "executor/",
    "reconciler/",
];

/// The wall clock, read directly.
const WALL_CLOCK: &[&str] = &["now_utc(", "SystemTime::now(", "Utc::now("];

#[test]
fn what_is_stored_is_never_timed_by_the_hosts_clock() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut broken = Vec::new();
    for file in rust_files(&src) {
        let relative = relative_to(&src, &file);
        let covered = TIMED_BY_THE_DATABASE
            .iter()
            .any(|prefix| relative.starts_with(prefix));
        if !covered || relative.ends_with("tests.rs") || relative.contains("/tests/") {
            continue;
        }
        let code = code_only(&std::fs::read_to_string(&file).unwrap());
        // A unit test's module is the last thing in a file; tests may read any clock.
        let code = code.split("#[cfg(test)]").next().unwrap_or_default();
        for (n, line) in code.lines().enumerate() {
            if WALL_CLOCK.iter().any(|call| line.contains(call)) {
                broken.push(format!("src/{relative}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "the host's clock is read where the database's must be (decision 024):\n{}",
        broken.join("\n")
    );
}

/// One name for one thing: a public type's name is defined once in `src`, so a reader (and
/// `use`) never has to ask which `Resolution` is meant.
#[test]
fn no_public_type_name_is_defined_twice() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut defined: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for file in rust_files(&src) {
        let relative = relative_to(&src, &file);
        let code = code_only(&std::fs::read_to_string(&file).unwrap());
        for (n, line) in code.lines().enumerate() {
            let words: Vec<&str> = line.split_whitespace().collect();
            if let ["pub", "struct" | "enum" | "type" | "trait", name, ..] = words[..] {
                let name: String = name
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if name.is_empty() {
                    continue; // a macro's `pub struct $name`
                }
                defined
                    .entry(name)
                    .or_default()
                    .push(format!("src/{relative}:{}", n + 1));
            }
        }
    }
    let twice: Vec<String> = defined
        .into_iter()
        .filter(|(_, places)| places.len() > 1)
        .map(|(name, places)| format!("{name}: {}", places.join(", ")))
        .collect();
    assert!(
        twice.is_empty(),
        "public type names defined more than once:\n{}",
        twice.join("\n")
    );
}

/// `file`'s path under `src`, with `/` between its parts.
fn relative_to(src: &Path, file: &Path) -> String {
    file.strip_prefix(src)
        .unwrap()
        .to_string_lossy()
        .replace('\\', "/")
}

/// The checker itself, on a snippet: grouped and nested `use`, `super::` from a file and from
/// an inline module, inline paths; nothing from comments, strings, `$crate` or `pub(crate)`.
#[test]
fn the_checker_finds_every_crate_path_and_nothing_in_comments_or_strings() {
    let snippet = r##"
        use crate::domain::Money;
        use crate::{config::Settings, store::{attempts, Store as S}};
        use super::super::executor::Executor; // crate::cli in a comment
        pub(crate) fn f() -> crate::gateway::Call { let _ = "crate::http"; let _ = r#"crate::app"#; }
        /* crate::demo /* nested */ crate::relay */
        macro_rules! m { () => { $crate::purge::run() } }
        fn g<'a>(_: &'a str) -> char { let _c = '"'; crate::clock::now() }
        mod tests {
            use super::Thing;
        }
    "##;
    let found: Vec<String> = imports(snippet, &["store".into(), "attempts".into()])
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        found,
        [
            "crate::domain::Money",
            "crate::config::Settings",
            "crate::store::attempts",
            "crate::store::Store",
            "crate::executor::Executor",
            "crate::gateway::Call",
            "crate::clock::now",
            "crate::store::attempts::Thing",
        ]
    );
}

/// A path into the crate, resolved from the crate root, and the line it is on.
#[derive(Clone)]
struct Import {
    path: Vec<String>,
    line: usize,
}

impl fmt::Display for Import {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "crate::{}", self.path.join("::"))
    }
}

/// The module a file under `src/` is (`store/attempts.rs` → `store::attempts`, `store/mod.rs`
/// → `store`, `lib.rs` → the root); `None` for a binary's files.
fn module_path(relative: &str) -> Option<Vec<String>> {
    if relative == "main.rs" || relative.starts_with("bin/") {
        return None;
    }
    let mut parts: Vec<String> = relative
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_owned)
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    Some(parts)
}

#[derive(Debug, PartialEq)]
enum Token {
    Ident(String),
    PathSep,
    Punct(char),
}

/// The crate paths in `text`, a file of module `module`.
fn imports(text: &str, module: &[String]) -> Vec<Import> {
    let tokens = tokens(&code_only(text));
    let mut found = Vec::new();
    // Inline modules (`mod tests { … }`) as (name, brace depth inside them).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < tokens.len() {
        let (token, line) = &tokens[i];
        let after_path = i > 0 && matches!(tokens[i - 1].0, Token::PathSep | Token::Punct('$'));
        match token {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth -= 1;
            }
            Token::Ident(word) if word == "mod" => {
                if let (Some((Token::Ident(name), _)), Some((Token::Punct('{'), _))) =
                    (tokens.get(i + 1), tokens.get(i + 2))
                {
                    inline.push((name.clone(), depth + 1));
                }
            }
            Token::Ident(word) if (word == "crate" || word == "super") && !after_path => {
                let mut base: Vec<String> = Vec::new();
                let mut j = i;
                if word == "super" {
                    base = module.to_vec();
                    base.extend(inline.iter().map(|(name, _)| name.clone()));
                    while tokens.get(j).map(|t| &t.0) == Some(&Token::Ident("super".into()))
                        && tokens.get(j + 1).map(|t| &t.0) == Some(&Token::PathSep)
                    {
                        base.pop();
                        j += 2;
                    }
                    if j == i {
                        i += 1;
                        continue; // `pub(super)`
                    }
                } else if tokens.get(i + 1).map(|t| &t.0) == Some(&Token::PathSep) {
                    j += 2;
                } else {
                    i += 1;
                    continue; // `pub(crate)`
                }
                let (paths, next) = use_tree(&tokens, j);
                for path in paths {
                    let mut full = base.clone();
                    full.extend(path);
                    found.push(Import {
                        path: full,
                        line: *line,
                    });
                }
                i = next;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    found
}

/// The paths of the use tree (or inline path) starting at `tokens[i]`, and the index after it.
fn use_tree(tokens: &[(Token, usize)], mut i: usize) -> (Vec<Vec<String>>, usize) {
    match tokens.get(i).map(|t| &t.0) {
        Some(Token::Punct('{')) => {
            let mut paths = Vec::new();
            i += 1;
            loop {
                match tokens.get(i).map(|t| &t.0) {
                    None => return (paths, i),
                    Some(Token::Punct('}')) => return (paths, i + 1),
                    Some(Token::Punct(',')) => i += 1,
                    _ => {
                        let (inner, next) = use_tree(tokens, i);
                        paths.extend(inner);
                        // Skip `as Name` and anything else up to the next item.
                        i = next;
                        while let Some((t, _)) = tokens.get(i) {
                            if matches!(t, Token::Punct(',' | '}')) {
                                break;
                            }
                            i += 1;
                        }
                    }
                }
            }
        }
        Some(Token::Ident(name)) if name != "as" => {
            let name = name.clone();
            if tokens.get(i + 1).map(|t| &t.0) == Some(&Token::PathSep)
                && matches!(
                    tokens.get(i + 2).map(|t| &t.0),
                    Some(Token::Ident(_) | Token::Punct('{' | '*'))
                )
            {
                let (inner, next) = use_tree(tokens, i + 2);
                let paths = inner
                    .into_iter()
                    .map(|mut p| {
                        p.insert(0, name.clone());
                        p
                    })
                    .collect();
                (paths, next)
            } else {
                (vec![vec![name]], i + 1)
            }
        }
        Some(Token::Punct('*')) => (vec![vec!["*".into()]], i + 1),
        _ => (vec![vec![]], i),
    }
}

/// Identifiers, `::` and single punctuation, each with its line.
fn tokens(code: &str) -> Vec<(Token, usize)> {
    let chars: Vec<char> = code.chars().collect();
    let mut tokens = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            tokens.push((Token::Ident(word.trim_start_matches("r#").to_owned()), line));
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            tokens.push((Token::PathSep, line));
            i += 2;
        } else {
            tokens.push((Token::Punct(c), line));
            i += 1;
        }
    }
    tokens
}

/// The service's manifest depends on the mock gateway (or the demo) only for its tests, and
/// has no features that could bring either into a build; no `src` file names them.
#[test]
fn the_service_links_neither_the_mock_gateway_nor_the_demo() {
    let manifest: toml::Table = std::fs::read_to_string("Cargo.toml")
        .expect("Cargo.toml")
        .parse()
        .expect("Cargo.toml is TOML");
    let package = |section: &str| -> Vec<String> {
        manifest
            .get(section)
            .and_then(toml::Value::as_table)
            .map(|table| table.keys().cloned().collect())
            .unwrap_or_default()
    };
    for double in ["mock-gateway", "onecharge-demo"] {
        assert!(
            !package("dependencies").iter().any(|name| name == double),
            "{double} is a dependency of the service library"
        );
    }
    assert!(
        package("features").is_empty(),
        "the service has features: {:?}",
        package("features")
    );
    let mut naming = Vec::new();
    for file in rust_files(Path::new("src")) {
        let code = code_only(&std::fs::read_to_string(&file).unwrap());
        if code.contains("mock_gateway") || code.contains("onecharge_demo") {
            naming.push(file.display().to_string());
        }
    }
    assert!(naming.is_empty(), "src files naming a double: {naming:?}");
}
