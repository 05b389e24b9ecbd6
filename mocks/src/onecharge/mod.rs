//! The onecharge dialect (docs/contract.md §3): its charges and refunds, each at most once
//! per idempotency key through one idempotency layer (`keyed`), and the list of charges.
//! What both dialects share (the charge and refund ledgers, faults, the controls) sits
//! beside it; the Stripe dialect is `crate::stripe`.

pub(crate) mod charges;
pub(crate) mod keyed;
pub(crate) mod list;
pub(crate) mod refunds;
