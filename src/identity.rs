//! Who this process is, in the names it writes: lease owners and transition actors. The
//! executor and the reconciler both sign their work with it, so it belongs to neither.

use uuid::Uuid;

/// A process-unique worker name, `<host>-<pid>-<random>`, written as lease owner and actor.
pub fn default_owner() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "local".into());
    format!(
        "{host}-{}-{}",
        std::process::id(),
        &Uuid::new_v4().simple().to_string()[..8]
    )
}
