//! The `onecharge` connector: the contract's own §3 dialect. `POST /v1/charges` under the
//! attempt's stored key, JSON body; lookup by `GET /v1/charges?idempotency_key=…`. Its
//! answers are read by the pure table in [`crate::domain::outcome`], unchanged.

use anyhow::Context as _;

pub(super) use crate::domain::outcome::{classify_charge, classify_lookup};

/// The §3 URLs under `gateway_url`.
#[derive(Debug, Clone)]
pub(super) struct Endpoints {
    pub(super) charges_url: reqwest::Url,
}

impl Endpoints {
    /// `base` ends with `/`: `http://host/api/` gives `http://host/api/v1/charges`.
    pub(super) fn new(base: &reqwest::Url) -> anyhow::Result<Self> {
        let charges_url = base
            .join("v1/charges")
            .with_context(|| format!("gateway_url `{base}` cannot take the path /v1/charges"))?;
        Ok(Self { charges_url })
    }
}
