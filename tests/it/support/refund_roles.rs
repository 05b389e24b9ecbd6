//! A refund's two roles driven together, one pass at a time: the executor's sender
//! (`executor::refunds`) and the reconciler's lookups (`reconciler::refunds`), as `serve`
//! runs them in one process.

use std::sync::Arc;

use onecharge::clock::Clock;
use onecharge::config::Settings;
use onecharge::executor::refunds::RefundSender;
use onecharge::gateway::{GatewayClient, GatewayHealth};
use onecharge::reconciler::refunds::RefundLookups;
use onecharge::store::Store;

/// The sender and the lookups of one process, on one client and one health.
pub struct RefundRoles {
    pub sender: RefundSender,
    pub lookups: RefundLookups,
}

/// What one pass of both did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RefundPass {
    pub admitted: usize,
    pub refused: usize,
    pub sent: usize,
    pub leases_expired: u64,
    pub looked_up: usize,
}

impl RefundRoles {
    pub fn new(
        store: Store,
        client: GatewayClient,
        health: GatewayHealth,
        settings: &Settings,
    ) -> Self {
        Self {
            sender: RefundSender::new(store.clone(), client.clone(), health.clone(), settings),
            lookups: RefundLookups::new(store, client, health, settings),
        }
    }

    /// The sender on a host clock of the test's.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.sender = self.sender.with_clock(clock);
        self
    }

    /// A pass of the sender, then one of the lookups.
    pub async fn pass(&self) -> anyhow::Result<RefundPass> {
        let sent = self.sender.pass().await?;
        let looked = self.lookups.pass().await?;
        Ok(RefundPass {
            admitted: sent.admitted,
            refused: sent.refused,
            sent: sent.sent,
            leases_expired: looked.leases_expired,
            looked_up: looked.looked_up,
        })
    }
}
