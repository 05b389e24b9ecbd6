//! `onecharge demo`: its options are `crate::demo::DemoArgs` (parsed by every build); the
//! run is the library's, and prints its own progress for the person watching it.

use crate::config::Settings;
#[cfg(not(feature = "demo"))]
use crate::config::UsageError;
pub use crate::demo::DemoArgs;

/// Runs `onecharge demo`.
#[cfg(feature = "demo")]
pub async fn run(settings: &Settings, args: DemoArgs) -> anyhow::Result<()> {
    crate::demo::run(settings, args).await
}

/// A build without the `demo` feature has no mock gateway to run the demo against.
#[cfg(not(feature = "demo"))]
pub async fn run(_: &Settings, _: DemoArgs) -> anyhow::Result<()> {
    Err(UsageError(
        "onecharge demo: this binary was built without the demo (--no-default-features); build it with the default features to run it".into(),
    )
    .into())
}
