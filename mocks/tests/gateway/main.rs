//! The mock gateway over real HTTP on loopback: every row of contract §3's response table
//! it can produce, idempotency, faults, key expiry, concurrency and the `/__*` controls; and
//! refunds, in both dialects.

mod admin;
mod charges;
mod concurrency;
mod expiry;
mod faults;
mod helpers;
mod refund_faults;
mod refunds;
mod stripe;
mod stripe_refunds;
mod webhooks;
