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

/// The man page `onecharge.1` (roff), generated from these definitions; committed as
/// `docs/onecharge.1` (see `crate::generated`).
pub fn man_page() -> Vec<u8> {
    let mut page = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut page)
        .expect("rendering into memory cannot fail");
    page
}
