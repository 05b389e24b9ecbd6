//! How a long-running command learns that it should stop: one [`CancellationToken`],
//! cancelled on SIGTERM or Ctrl-C. Every role's loop selects on it; `serve` and
//! `reconcile` (without `--once`) listen with [`cancel_on_signal`]. A module of its own so
//! that a role can stop on a signal without importing the application that assembles it.

use tokio_util::sync::CancellationToken;

/// Cancels `shutdown` on SIGTERM or Ctrl-C.
pub async fn cancel_on_signal(shutdown: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
    tracing::info!("shutdown requested: finishing work in hand");
    shutdown.cancel();
}
