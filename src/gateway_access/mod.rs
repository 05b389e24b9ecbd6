//! What a role needs to call the gateway, in one bundle: the client, the health every
//! caller obeys and updates (credentials pause, circuit breaker), and the fleet-wide rate
//! limit whose permits come before a claim (decision 62). The executor and the reconciler
//! each hold one [`GatewayAccess`]; the permit waits they share are its methods.
//!
//! It sits beside `src/gateway/`, not inside it, for the reason its `limit` does: the
//! rate limit takes its tokens from the database, and the gateway client never touches the
//! database.

pub mod limit;

use std::time::Duration;

use crate::config::Settings;
use crate::gateway::{GatewayClient, GatewayHealth};
use crate::gateway_access::limit::{GatewayRateLimit, Operation, Permits, Take};
use crate::store::Store;

/// The gateway as one role of one instance may call it. Cheap to clone: clones share the
/// client's pool, the health and the rate limit's lease.
#[derive(Clone, Debug)]
pub struct GatewayAccess {
    /// The connector `gateway_kind` chose.
    pub client: GatewayClient,
    /// Shared with whoever else calls this gateway (readiness, the other roles).
    pub health: GatewayHealth,
    /// The fleet-wide `gateway_max_rate`: permits are taken before a claim, one per call.
    pub rate_limit: GatewayRateLimit,
}

impl GatewayAccess {
    /// The bundle for `client` and `health`, with the rate limit `settings` ask for on the
    /// bucket of the configured gateway (its own lease: each role holds its own).
    pub fn new(
        store: Store,
        client: GatewayClient,
        health: GatewayHealth,
        settings: &Settings,
    ) -> Self {
        let rate_limit = GatewayRateLimit::from_settings(store, settings, client.kind());
        Self {
            client,
            health,
            rate_limit,
        }
    }

    /// A permit for one lookup, waiting as long as the bucket asks (the caller's future is
    /// what shutdown drops).
    pub async fn lookup_permit(&self) -> Permits {
        loop {
            match self.rate_limit.for_lookups(1).await {
                Take::Granted(permits) => return permits,
                Take::Wait(wait) => tokio::time::sleep(wait).await,
            }
        }
    }

    /// A permit for one lookup within `patience`, or, when none came in time, why (the
    /// bucket empty, or the database not answering), in one sentence for a person: what a
    /// request someone waits on inside one HTTP call or command uses.
    pub async fn lookup_permit_within(&self, patience: Duration) -> Result<Permits, String> {
        self.permit_within(Operation::Lookup, patience).await
    }

    /// A permit for one cancel (Stripe's, after a confirm left a PaymentIntent
    /// `requires_action`) within `patience`, or why none came: the executor holds a lease
    /// meanwhile, so it waits no longer than a call may take.
    pub async fn cancel_permit_within(&self, patience: Duration) -> Result<Permits, String> {
        self.permit_within(Operation::Cancel, patience).await
    }

    async fn permit_within(
        &self,
        operation: Operation,
        patience: Duration,
    ) -> Result<Permits, String> {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let take = match operation {
                Operation::Cancel => self.rate_limit.for_cancels(1).await,
                _ => self.rate_limit.for_lookups(1).await,
            };
            match take {
                Take::Granted(permits) => return Ok(permits),
                Take::Wait(wait) if tokio::time::Instant::now() + wait <= deadline => {
                    tokio::time::sleep(wait).await
                }
                Take::Wait(_) => return Err(self.rate_limit.why_refused(patience)),
            }
        }
    }
}
