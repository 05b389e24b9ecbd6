//! The Stripe dialect (`--dialect stripe`): PaymentIntents create / confirm / retrieve /
//! cancel, refunds and customers, form-encoded, with Stripe's idempotency semantics, errors
//! and test payment methods, and every fault of the onecharge dialect applied to the call
//! that charges (and the refunds' to the call that refunds). It shares the key store, fault
//! dice, latency, request log, counters and the ledgers of charges and refunds with the
//! onecharge dialect; only the wire format and the PaymentIntent lifecycle are its own.
//!
//! Below the shared state: `intent` (the PaymentIntents and the dialect's `Store`),
//! `aftermath` (disputes, and refunds as Stripe shows them), `events` (webhook endpoints,
//! signing, sending), `params`, `methods`, `currency`, `error`. Above it, the handlers:
//! `api`, `refunds`, `list`, `disputes`, `webhooks`, through `respond` (every GET) and
//! `post` (every POST).

pub(crate) mod access;
mod aftermath;
pub(crate) mod api;
mod currency;
pub(crate) mod disputes;
mod error;
mod events;
pub(crate) mod intent;
pub(crate) mod list;
mod methods;
mod params;
mod post;
pub(crate) mod refunds;
mod respond;
pub(crate) mod webhooks;

pub use events::WebhookDeliveries;
pub use methods::payment_methods;
