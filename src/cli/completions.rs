//! `onecharge completions <shell>` and the man page, both generated from the clap
//! definitions of [`super::Cli`].

use clap::CommandFactory as _;

use super::Cli;

/// Prints the completion script for `shell`. Needs no configuration: a completion script is
/// installed before there is any.
pub fn print(shell: clap_complete::Shell) {
    clap_complete::generate(
        shell,
        &mut Cli::command(),
        "onecharge",
        &mut std::io::stdout(),
    );
}

/// Where the subcommands' man pages are committed, from the repository's root.
pub const MAN_DIRECTORY: &str = "docs/man";

/// The command as the man pages describe it: built (so that every subcommand knows its
/// full name, `onecharge-attempts-resolve`) and without clap's `help` subcommand, which has
/// no page of its own.
fn documented() -> clap::Command {
    let mut command = Cli::command().disable_help_subcommand(true);
    command.build();
    command
}

/// The man page `onecharge.1` (roff), generated from these definitions; committed as
/// `docs/onecharge.1` (see `crate::documents`). Its SEE ALSO names a page per subcommand,
/// each in [`subcommand_pages`].
pub fn man_page() -> Vec<u8> {
    render(documented())
}

/// A man page for every subcommand, at every depth, that the top page or a parent's page
/// names (`onecharge-attempts(1)`, `onecharge-attempts-resolve(1)`…): (file name, roff),
/// committed under [`MAN_DIRECTORY`]. Hidden subcommands have none.
pub fn subcommand_pages() -> Vec<(String, Vec<u8>)> {
    let mut pages = Vec::new();
    let mut parents = vec![documented()];
    while let Some(parent) = parents.pop() {
        for sub in parent.get_subcommands().filter(|s| !s.is_hide_set()) {
            let man = clap_mangen::Man::new(sub.clone());
            pages.push((man.get_filename(), render(sub.clone())));
            parents.push(sub.clone());
        }
    }
    pages.sort();
    pages
}

fn render(command: clap::Command) -> Vec<u8> {
    let mut page = Vec::new();
    clap_mangen::Man::new(command)
        .render(&mut page)
        .expect("rendering into memory cannot fail");
    page
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pages a roff page names as `onecharge\-x\-y(1)`.
    fn named(page: &[u8]) -> Vec<String> {
        let text = String::from_utf8_lossy(page).replace("\\-", "-");
        text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '(' || c == ')'))
            .filter_map(|word| word.strip_suffix("(1)"))
            .filter(|name| name.starts_with("onecharge-"))
            .map(|name| format!("{name}.1"))
            .collect()
    }

    #[test]
    fn every_page_a_man_page_names_exists() {
        let pages = subcommand_pages();
        let files: Vec<&str> = pages.iter().map(|(name, _)| name.as_str()).collect();
        let mut missing = Vec::new();
        for page in std::iter::once(man_page()).chain(pages.iter().map(|(_, p)| p.clone())) {
            for name in named(&page) {
                if !files.contains(&name.as_str()) {
                    missing.push(name);
                }
            }
        }
        assert!(missing.is_empty(), "named but not generated: {missing:?}");
        assert!(files.contains(&"onecharge-attempts-resolve.1"), "{files:?}");
    }
}
