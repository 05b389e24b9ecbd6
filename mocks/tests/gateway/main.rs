//! The mock gateway over real HTTP on loopback: every row of contract §3's response table
//! it can produce, idempotency, faults, key expiry, concurrency and the `/__*` controls.

mod admin;
mod charges;
mod concurrency;
mod expiry;
mod faults;
mod helpers;
mod stripe;
mod webhooks;
