//! What onecharge currently believes about the gateway, shared by every task that calls it
//! and by readiness and metrics: whether its credentials were rejected (then all calls
//! pause) and the circuit breaker's state (then calls stop for a cooldown).
//!
//! Time comes from the caller (the executor's clock), so tests drive it without sleeping.
//! Probes are rationed by time rather than by an "outstanding" flag: a probe admission that
//! finds nothing to do cannot wedge the breaker.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use time::OffsetDateTime;

use crate::domain::outcome::{GatewayOutcome, LookupOutcome};

/// The circuit breaker's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls flow.
    Closed,
    /// Too many consecutive failures: no calls until the cooldown has passed.
    Open,
    /// The cooldown passed: one probe call decides between closed and open.
    HalfOpen,
}

impl BreakerState {
    /// The bounded metric label and gauge value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Closed => "closed",
            Self::Open => "open",
            Self::HalfOpen => "half_open",
        }
    }

    fn gauge(self) -> f64 {
        match self {
            Self::Closed => 0.0,
            Self::Open => 1.0,
            Self::HalfOpen => 2.0,
        }
    }
}

/// How many gateway calls a caller may start now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// As many as the caller's concurrency allows.
    Open,
    /// Exactly one call, to test whether the gateway (or its credentials) works again.
    Probe,
    /// None until `until`.
    Wait {
        until: OffsetDateTime,
        reason: &'static str,
    },
}

impl Admission {
    /// How many calls of at most `limit` this admission allows.
    pub fn allowance(self, limit: usize) -> usize {
        match self {
            Self::Open => limit,
            Self::Probe => limit.min(1),
            Self::Wait { .. } => 0,
        }
    }
}

/// A copy of the health state, for readiness, status output and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthSnapshot {
    /// The HTTP status (401/403) with which the gateway rejected the credentials, while
    /// all calls are paused for it.
    pub credentials_rejected: Option<u16>,
    pub breaker: BreakerState,
    pub consecutive_failures: u32,
}

/// Shared gateway health. Clones share the state.
#[derive(Debug, Clone)]
pub struct GatewayHealth {
    inner: Arc<Mutex<State>>,
    failure_threshold: u32,
    cooldown: Duration,
    probe_interval: Duration,
}

#[derive(Debug)]
struct State {
    credentials: Option<CredentialsPause>,
    breaker: BreakerState,
    consecutive_failures: u32,
    /// When the next probe may go (breaker open or half-open).
    breaker_probe_at: OffsetDateTime,
}

#[derive(Debug)]
struct CredentialsPause {
    status: u16,
    next_probe_at: OffsetDateTime,
}

impl GatewayHealth {
    /// `failure_threshold` consecutive failures open the breaker for `cooldown`; while the
    /// credentials are rejected one probe is admitted every `probe_interval`.
    pub fn new(failure_threshold: u32, cooldown: Duration, probe_interval: Duration) -> Self {
        metrics::gauge!("onecharge_gateway_paused").set(0.0);
        metrics::gauge!("onecharge_gateway_breaker_state").set(BreakerState::Closed.gauge());
        Self {
            inner: Arc::new(Mutex::new(State {
                credentials: None,
                breaker: BreakerState::Closed,
                consecutive_failures: 0,
                breaker_probe_at: OffsetDateTime::UNIX_EPOCH,
            })),
            failure_threshold: failure_threshold.max(1),
            cooldown,
            probe_interval,
        }
    }

    /// From the executor settings.
    pub fn from_settings(settings: &crate::config::ExecutorSettings) -> Self {
        Self::new(
            settings.breaker_failure_threshold,
            settings.breaker_cooldown,
            settings.credentials_probe_interval,
        )
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock leaves plain data behind; keep using it.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Asks whether calls may start now. A `Probe` answer is handed out at most once per
    /// probe interval (credentials) or cooldown (breaker).
    pub fn admit(&self, now: OffsetDateTime) -> Admission {
        let mut state = self.state();
        if let Some(pause) = &mut state.credentials {
            if now >= pause.next_probe_at {
                pause.next_probe_at = now + self.probe_interval;
                return Admission::Probe;
            }
            return Admission::Wait {
                until: pause.next_probe_at,
                reason: "gateway credentials rejected",
            };
        }
        match state.breaker {
            BreakerState::Closed => Admission::Open,
            BreakerState::Open | BreakerState::HalfOpen if now >= state.breaker_probe_at => {
                if state.breaker == BreakerState::Open {
                    tracing::info!("circuit breaker half-open: one probe call to the gateway");
                }
                state.breaker = BreakerState::HalfOpen;
                state.breaker_probe_at = now + self.cooldown;
                metrics::gauge!("onecharge_gateway_breaker_state")
                    .set(BreakerState::HalfOpen.gauge());
                Admission::Probe
            }
            BreakerState::Open | BreakerState::HalfOpen => Admission::Wait {
                until: state.breaker_probe_at,
                reason: "circuit breaker open",
            },
        }
    }

    /// Whether the credentials are currently rejected (readiness reports unready).
    pub fn credentials_rejected(&self) -> bool {
        self.state().credentials.is_some()
    }

    /// A copy of the state.
    pub fn snapshot(&self) -> HealthSnapshot {
        let state = self.state();
        HealthSnapshot {
            credentials_rejected: state.credentials.as_ref().map(|p| p.status),
            breaker: state.breaker,
            consecutive_failures: state.consecutive_failures,
        }
    }

    /// Learns from one charge answer.
    pub fn record(&self, outcome: &GatewayOutcome, now: OffsetDateTime) {
        match outcome {
            GatewayOutcome::CredentialsFault { status } => self.credentials_fault(*status, now),
            outcome if outcome.is_gateway_failure() => self.failure(now),
            _ => self.success(),
        }
    }

    /// Learns from one lookup answer (the reconciler's calls).
    pub fn record_lookup(&self, outcome: &LookupOutcome, now: OffsetDateTime) {
        match outcome {
            LookupOutcome::CredentialsFault { status } => self.credentials_fault(*status, now),
            LookupOutcome::Failed { .. } => self.failure(now),
            LookupOutcome::Found(_) => self.success(),
        }
    }

    fn credentials_fault(&self, status: u16, now: OffsetDateTime) {
        let mut state = self.state();
        if state.credentials.is_none() {
            tracing::error!(
                http_status = status,
                "the gateway rejected onecharge's API key: pausing every gateway call (attempts stay pending); fix gateway_api_key"
            );
            metrics::counter!("onecharge_gateway_credentials_faults_total").increment(1);
        }
        state.credentials = Some(CredentialsPause {
            status,
            next_probe_at: now + self.probe_interval,
        });
        metrics::gauge!("onecharge_gateway_paused").set(1.0);
    }

    fn failure(&self, now: OffsetDateTime) {
        let mut state = self.state();
        state.consecutive_failures = state.consecutive_failures.saturating_add(1);
        let trips = state.breaker == BreakerState::HalfOpen
            || state.consecutive_failures >= self.failure_threshold;
        if trips {
            if state.breaker != BreakerState::Open {
                tracing::warn!(
                    consecutive_failures = state.consecutive_failures,
                    cooldown_ms = self.cooldown.as_millis() as u64,
                    "circuit breaker open: the gateway keeps failing; pausing calls"
                );
            }
            state.breaker = BreakerState::Open;
            state.breaker_probe_at = now + self.cooldown;
            metrics::gauge!("onecharge_gateway_breaker_state").set(BreakerState::Open.gauge());
        }
    }

    fn success(&self) {
        let mut state = self.state();
        if let Some(pause) = state.credentials.take() {
            tracing::info!(
                was = pause.status,
                "the gateway accepts the credentials again: resuming calls"
            );
            metrics::gauge!("onecharge_gateway_paused").set(0.0);
        }
        state.consecutive_failures = 0;
        if state.breaker != BreakerState::Closed {
            tracing::info!("circuit breaker closed: the gateway answers again");
            state.breaker = BreakerState::Closed;
            metrics::gauge!("onecharge_gateway_breaker_state").set(BreakerState::Closed.gauge());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    const T0: OffsetDateTime = datetime!(2026-11-29 10:00 UTC);

    fn health() -> GatewayHealth {
        GatewayHealth::new(3, Duration::from_secs(30), Duration::from_secs(10))
    }

    fn failure() -> GatewayOutcome {
        GatewayOutcome::NotSent {
            reason: "connection refused".into(),
        }
    }

    fn success() -> GatewayOutcome {
        GatewayOutcome::Succeeded {
            charge_id: "ch_1".into(),
            replayed: false,
        }
    }

    #[test]
    fn the_breaker_opens_after_consecutive_failures_and_a_success_resets_the_count() {
        let h = health();
        h.record(&failure(), T0);
        h.record(&failure(), T0);
        h.record(&success(), T0);
        h.record(&failure(), T0);
        h.record(&failure(), T0);
        assert_eq!(h.admit(T0), Admission::Open);
        h.record(&failure(), T0);
        assert_eq!(h.snapshot().breaker, BreakerState::Open);
        assert!(matches!(
            h.admit(T0 + Duration::from_secs(29)),
            Admission::Wait { .. }
        ));
    }

    #[test]
    fn after_the_cooldown_one_probe_decides_whether_the_breaker_closes() {
        let h = health();
        for _ in 0..3 {
            h.record(&failure(), T0);
        }
        let later = T0 + Duration::from_secs(30);
        assert_eq!(h.admit(later), Admission::Probe);
        assert!(
            matches!(h.admit(later), Admission::Wait { .. }),
            "only one probe per cooldown"
        );
        // a failed probe re-opens at once
        h.record(&failure(), later);
        assert_eq!(h.snapshot().breaker, BreakerState::Open);
        let again = later + Duration::from_secs(30);
        assert_eq!(h.admit(again), Admission::Probe);
        h.record(&success(), again);
        assert_eq!(h.snapshot().breaker, BreakerState::Closed);
        assert_eq!(h.admit(again), Admission::Open);
    }

    #[test]
    fn rejected_credentials_pause_every_call_until_a_probe_is_accepted() {
        let h = health();
        h.record(&GatewayOutcome::CredentialsFault { status: 401 }, T0);
        assert!(h.credentials_rejected());
        assert!(matches!(
            h.admit(T0),
            Admission::Wait {
                reason: "gateway credentials rejected",
                ..
            }
        ));
        let later = T0 + Duration::from_secs(10);
        assert_eq!(h.admit(later), Admission::Probe);
        assert!(matches!(h.admit(later), Admission::Wait { .. }));
        // a probe that never got an answer does not prove the key works
        h.record(&failure(), later);
        assert!(h.credentials_rejected());
        h.record(
            &GatewayOutcome::Declined {
                charge_id: "ch".into(),
                decline_code: None,
                replayed: false,
            },
            later,
        );
        assert!(!h.credentials_rejected());
        assert_eq!(h.admit(later), Admission::Open);
    }

    #[test]
    fn a_probe_admission_is_limited_to_one_call() {
        assert_eq!(Admission::Probe.allowance(32), 1);
        assert_eq!(Admission::Open.allowance(32), 32);
        assert_eq!(
            Admission::Wait {
                until: T0,
                reason: "x"
            }
            .allowance(32),
            0
        );
    }
}
