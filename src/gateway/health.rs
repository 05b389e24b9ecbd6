//! What onecharge currently believes about the gateway, shared by every task that calls it
//! and by readiness and metrics: whether its credentials were rejected (then all calls
//! pause), whether the key lacks the permission for one kind of work (a restricted key
//! refused `403`: then that work alone stops, decision 245), and the circuit breaker's
//! state (then calls stop for a cooldown).
//!
//! Time comes from the caller (the executor's clock), so tests drive it without sleeping.
//! Probes are rationed by time rather than by an "outstanding" flag: a probe admission that
//! finds nothing to do cannot wedge the breaker.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use time::OffsetDateTime;

use crate::domain::outcome::{GatewayOutcome, LookupOutcome};
use crate::domain::refund_call::RefundOutcome;

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

/// The kinds of work that move money, each stopped on its own when the key lacks its
/// permission (`403`): a restricted key that may charge and not refund still charges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// Charges: the executor's prepare, charge and cancel.
    Charges,
    /// Refunds: the refund worker's sends.
    Refunds,
}

impl Work {
    /// Why this work is stopped, for readiness-like status lines.
    pub fn what(self) -> &'static str {
        match self {
            Self::Charges => "gateway key lacks the permission to charge",
            Self::Refunds => "gateway key lacks the permission to refund",
        }
    }
}

/// A copy of the health state, for readiness, status output and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthSnapshot {
    /// The HTTP status (401/403) with which the gateway rejected the credentials, while
    /// all calls are paused for it.
    pub credentials_rejected: Option<u16>,
    /// The HTTP status (404/405/3xx) with which the gateway answered a charge sent to the
    /// wrong URL, while all calls are paused for it.
    pub endpoint_fault: Option<u16>,
    /// The configuration fault (401/403/404/405/3xx) the last lookup met, until a lookup
    /// succeeds. Lookups keep their own health: they never pause charges, open or close the
    /// breaker, or end a pause.
    pub lookup_fault: Option<u16>,
    /// The kinds of work stopped because the key lacks their permission (`403`); the
    /// rest goes on.
    pub forbidden: Vec<Work>,
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
    /// A configuration fault that stops every call: the key rejected (401) or the URL
    /// (404/405/3xx).
    credentials: Option<CredentialsPause>,
    /// When the next charge may probe whether the key was granted the permission to charge
    /// (set by a charge's `403`).
    charges_forbidden: Option<OffsetDateTime>,
    /// The same for refunds (set by a refund's `403`).
    refunds_forbidden: Option<OffsetDateTime>,
    /// The configuration fault the reconciler's last lookup met (readiness only).
    lookup_fault: Option<u16>,
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
                charges_forbidden: None,
                refunds_forbidden: None,
                lookup_fault: None,
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

    /// Asks whether charges may start now. A `Probe` answer is handed out at most once per
    /// probe interval (credentials, a missing permission) or cooldown (breaker).
    pub fn admit(&self, now: OffsetDateTime) -> Admission {
        self.admit_for(Work::Charges, now)
    }

    /// Asks whether refunds may start now: as [`GatewayHealth::admit`], but a charge's
    /// missing permission does not hold them, and a refund's holds only them.
    pub fn admit_refunds(&self, now: OffsetDateTime) -> Admission {
        self.admit_for(Work::Refunds, now)
    }

    fn admit_for(&self, work: Work, now: OffsetDateTime) -> Admission {
        let mut state = self.state();
        if let Some(pause) = &mut state.credentials {
            if now >= pause.next_probe_at {
                pause.next_probe_at = now + self.probe_interval;
                return Admission::Probe;
            }
            return Admission::Wait {
                until: pause.next_probe_at,
                reason: if is_credentials(pause.status) {
                    "gateway credentials rejected"
                } else {
                    "gateway URL misconfigured"
                },
            };
        }
        let forbidden = match work {
            Work::Charges => &mut state.charges_forbidden,
            Work::Refunds => &mut state.refunds_forbidden,
        };
        if let Some(next_probe_at) = forbidden {
            if now >= *next_probe_at {
                *next_probe_at = now + self.probe_interval;
                return Admission::Probe;
            }
            return Admission::Wait {
                until: *next_probe_at,
                reason: work.what(),
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

    /// Why charges are held back now, if they are: the credentials or the URL are rejected,
    /// the key lacks the permission to charge, or the breaker is open or half-open (its
    /// probe already handed out). Unlike
    /// [`GatewayHealth::admit`] it hands out no probe: an attempt claimed ahead asks this
    /// just before it would be sent.
    pub fn holding_calls(&self) -> Option<&'static str> {
        let state = self.state();
        match (&state.credentials, state.breaker) {
            (Some(pause), _) if is_credentials(pause.status) => {
                Some("gateway credentials rejected")
            }
            (Some(_), _) => Some("gateway URL misconfigured"),
            (None, _) if state.charges_forbidden.is_some() => Some(Work::Charges.what()),
            (None, BreakerState::Closed) => None,
            (None, BreakerState::Open | BreakerState::HalfOpen) => Some("circuit breaker open"),
        }
    }

    /// Whether the credentials are currently rejected, by a charge, a refund or a lookup.
    pub fn credentials_rejected(&self) -> bool {
        let state = self.state();
        state
            .credentials
            .as_ref()
            .is_some_and(|p| is_credentials(p.status))
            || state.lookup_fault.is_some_and(is_credentials)
    }

    /// What readiness reports while a configuration fault that stops every call stands, if
    /// one does. A missing permission (`403`) is not one: the rest of the work goes on, and
    /// the alert `OnechargeGatewayPermissionMissing` names the permission.
    pub fn pause_problem(&self) -> Option<&'static str> {
        let state = self.state();
        match (state.credentials.as_ref().map(|p| p.status), state.lookup_fault) {
            (Some(status), _) if is_credentials(status) => {
                Some("gateway rejected the API key (gateway calls paused)")
            }
            (Some(_), _) => Some(
                "gateway answered 404/405/3xx: gateway_url looks wrong (gateway calls paused)",
            ),
            (None, Some(status)) if is_credentials(status) => {
                Some("gateway rejected the API key for lookups (reconciler waiting)")
            }
            (None, Some(_)) => Some(
                "gateway lookups answered 404/405/3xx: gateway_url looks wrong (reconciler waiting)",
            ),
            (None, None) => None,
        }
    }

    /// A copy of the state.
    pub fn snapshot(&self) -> HealthSnapshot {
        let state = self.state();
        let paused = state.credentials.as_ref().map(|p| p.status);
        let forbidden = [
            (Work::Charges, state.charges_forbidden.is_some()),
            (Work::Refunds, state.refunds_forbidden.is_some()),
        ];
        HealthSnapshot {
            credentials_rejected: paused.filter(|s| is_credentials(*s)),
            endpoint_fault: paused.filter(|s| !is_credentials(*s)),
            lookup_fault: state.lookup_fault,
            forbidden: forbidden
                .into_iter()
                .filter_map(|(work, stopped)| stopped.then_some(work))
                .collect(),
            breaker: state.breaker,
            consecutive_failures: state.consecutive_failures,
        }
    }

    /// Learns from one charge answer. A `403` (the key lacks the permission to charge)
    /// stops charges alone; a `401` or a wrong URL stops every call.
    pub fn record(&self, outcome: &GatewayOutcome, now: OffsetDateTime) {
        match outcome {
            GatewayOutcome::CredentialsFault { status: FORBIDDEN } => {
                self.forbidden(Work::Charges, now)
            }
            GatewayOutcome::CredentialsFault { status }
            | GatewayOutcome::EndpointFault { status } => self.credentials_fault(*status, now),
            outcome if outcome.is_gateway_failure() => self.failure(now),
            _ => self.success(Work::Charges),
        }
    }

    /// Learns from the first step of a two-step charge ([`super::GatewayClient::prepare`]):
    /// a refusal counts as that outcome would for a charge; a prepared object shows a
    /// working gateway and working credentials.
    pub fn record_prepared(&self, prepared: &super::Prepared, now: OffsetDateTime) {
        match prepared {
            super::Prepared::Object { .. } => self.success(Work::Charges),
            super::Prepared::Refused(outcome) => self.record(outcome, now),
        }
    }

    /// Learns from one refund request's answer: a refund moves money like a charge, so its
    /// answers open and close the same breaker and pause the same calls (decision 208). A
    /// refund sent as the breaker's probe closes it when the gateway answers. A `403` (the
    /// key lacks the permission to refund) stops refunds alone, never charges (decision 245).
    pub fn record_refund(&self, outcome: &RefundOutcome, now: OffsetDateTime) {
        match outcome {
            RefundOutcome::ConfigurationFault { status: FORBIDDEN } => {
                self.forbidden(Work::Refunds, now)
            }
            RefundOutcome::ConfigurationFault { status } => self.credentials_fault(*status, now),
            RefundOutcome::NotSent { .. } | RefundOutcome::Ambiguous { .. } => self.failure(now),
            _ => self.success(Work::Refunds),
        }
    }

    /// Gives back a probe [`GatewayHealth::admit`] handed out and the caller did not use (it
    /// had nothing to send): the next caller may probe at once instead of a cooldown later.
    /// Every gate that rations probes is opened: at worst another kind of work probes early.
    pub fn return_probe(&self, now: OffsetDateTime) {
        let mut guard = self.state();
        let state = &mut *guard;
        if state.breaker == BreakerState::HalfOpen {
            state.breaker_probe_at = now;
        } else if let Some(pause) = &mut state.credentials {
            pause.next_probe_at = now;
        }
        for gate in [&mut state.charges_forbidden, &mut state.refunds_forbidden]
            .into_iter()
            .flatten()
        {
            *gate = now;
        }
    }

    /// Learns from one lookup answer (the reconciler's calls), for readiness only. Lookup
    /// health is kept apart from charge health: a lookup is a different request (some keys
    /// may read and not charge), so a failed lookup never opens the charges' breaker, and
    /// an answered one never closes it nor ends a pause that charges still hit. A `403`
    /// (the key lacks the permission to read) is not a readiness fault: the lookups that
    /// need it wait, counted and alerted by the permission they lack (decision 245).
    pub fn record_lookup(&self, outcome: &LookupOutcome, _now: OffsetDateTime) {
        let mut state = self.state();
        match outcome {
            LookupOutcome::CredentialsFault { status: FORBIDDEN } => {}
            LookupOutcome::CredentialsFault { status }
            | LookupOutcome::EndpointFault { status } => {
                if state.lookup_fault.is_none() {
                    tracing::error!(
                        http_status = status,
                        "a gateway lookup met a configuration fault (401/403: gateway_api_key; 404/405/3xx: gateway_url); unknown attempts wait"
                    );
                }
                state.lookup_fault = Some(*status);
            }
            LookupOutcome::Found(_) => state.lookup_fault = None,
            LookupOutcome::Failed { .. } => {}
        }
    }

    fn credentials_fault(&self, status: u16, now: OffsetDateTime) {
        let mut state = self.state();
        if state.credentials.is_none() {
            if is_credentials(status) {
                tracing::error!(
                    http_status = status,
                    "the gateway rejected onecharge's API key: pausing every gateway call (attempts stay pending); fix gateway_api_key"
                );
                metrics::counter!("onecharge_gateway_credentials_faults_total").increment(1);
            } else {
                tracing::error!(
                    http_status = status,
                    "the gateway answered a charge with HTTP {status}: gateway_url looks wrong; pausing every gateway call (attempts stay pending); fix gateway_url"
                );
                metrics::counter!("onecharge_gateway_endpoint_faults_total").increment(1);
            }
        }
        state.credentials = Some(CredentialsPause {
            status,
            next_probe_at: now + self.probe_interval,
        });
        metrics::gauge!("onecharge_gateway_paused").set(1.0);
    }

    /// The key lacks the permission for `work`: that work alone stops, one probe per
    /// `credentials_probe_interval` asking whether it was granted.
    fn forbidden(&self, work: Work, now: OffsetDateTime) {
        let mut state = self.state();
        let gate = match work {
            Work::Charges => &mut state.charges_forbidden,
            Work::Refunds => &mut state.refunds_forbidden,
        };
        if gate.is_none() {
            tracing::error!(
                http_status = FORBIDDEN,
                "the gateway refused onecharge's key a permission: {} stop until it is granted (the rest goes on); see onecharge_gateway_permission_denied_total for the permission",
                match work {
                    Work::Charges => "charges",
                    Work::Refunds => "refunds",
                }
            );
        }
        *gate = Some(now + self.probe_interval);
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

    /// An answer for `work` that shows a working gateway and a key that may do it.
    fn success(&self, work: Work) {
        let mut state = self.state();
        let gate = match work {
            Work::Charges => &mut state.charges_forbidden,
            Work::Refunds => &mut state.refunds_forbidden,
        };
        if gate.take().is_some() {
            tracing::info!("the gateway grants the key's missing permission now: resuming");
        }
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

/// `403`: the key is known and lacks a permission for this request (Stripe since its API
/// version 2016-10-19; a restricted key `rk_…`).
const FORBIDDEN: u16 = 403;

/// 401/403: the credentials; anything else that pauses (404/405/3xx) is the URL.
fn is_credentials(status: u16) -> bool {
    matches!(status, 401 | FORBIDDEN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::GatewayChargeId;
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
            charge_id: GatewayChargeId::from_gateway("ch_1"),
            replayed: false,
        }
    }

    #[test]
    fn refund_answers_open_and_close_the_breaker_and_an_unused_probe_is_given_back() {
        let h = health();
        let lost = RefundOutcome::Ambiguous {
            reason: "no answer after the refund was sent".into(),
        };
        for _ in 0..3 {
            h.record_refund(&lost, T0);
        }
        assert_eq!(h.snapshot().breaker, BreakerState::Open);
        let after = T0 + Duration::from_secs(30);
        assert_eq!(h.admit(after), Admission::Probe);
        assert!(matches!(h.admit(after), Admission::Wait { .. }));
        h.return_probe(after);
        assert_eq!(
            h.admit(after),
            Admission::Probe,
            "the probe is handed out again"
        );
        h.record_refund(
            &RefundOutcome::Refused {
                reason: "over what is left".into(),
            },
            after,
        );
        assert_eq!(
            h.snapshot().breaker,
            BreakerState::Closed,
            "the gateway answered"
        );
        assert_eq!(h.admit(after), Admission::Open);
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
                charge_id: GatewayChargeId::from_gateway("ch"),
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

    #[test]
    fn lookups_never_open_close_or_end_what_charges_decide() {
        let h = health();
        let found = LookupOutcome::Found(vec![]);
        let failed = LookupOutcome::Failed {
            reason: "HTTP 503".into(),
        };
        // failing lookups do not open the charges' breaker
        for _ in 0..10 {
            h.record_lookup(&failed, T0);
        }
        assert_eq!(h.snapshot().breaker, BreakerState::Closed);
        assert_eq!(h.admit(T0), Admission::Open);
        // an open breaker stays open whatever lookups answer
        for _ in 0..3 {
            h.record(&failure(), T0);
        }
        h.record_lookup(&found, T0);
        assert_eq!(h.snapshot().breaker, BreakerState::Open);
        assert!(matches!(h.admit(T0), Admission::Wait { .. }));
        // a credentials pause that charges hit is not ended by a lookup that works
        let paused = health();
        paused.record(&GatewayOutcome::CredentialsFault { status: 401 }, T0);
        paused.record_lookup(&found, T0);
        assert!(paused.credentials_rejected());
        assert!(matches!(paused.admit(T0), Admission::Wait { .. }));
    }

    #[test]
    fn a_wrong_url_pauses_calls_and_says_so() {
        let h = health();
        h.record(&GatewayOutcome::EndpointFault { status: 404 }, T0);
        assert!(matches!(
            h.admit(T0),
            Admission::Wait {
                reason: "gateway URL misconfigured",
                ..
            }
        ));
        assert!(!h.credentials_rejected(), "not the key");
        assert!(h.pause_problem().unwrap().contains("gateway_url"));
        assert_eq!(h.snapshot().endpoint_fault, Some(404));
        assert_eq!(h.admit(T0 + Duration::from_secs(10)), Admission::Probe);
        h.record(&success(), T0 + Duration::from_secs(10));
        assert_eq!(h.admit(T0 + Duration::from_secs(10)), Admission::Open);
        assert_eq!(h.pause_problem(), None);
    }

    #[test]
    fn a_403_stops_only_the_work_that_needs_the_permission() {
        let h = health();
        h.record_refund(&RefundOutcome::ConfigurationFault { status: 403 }, T0);
        assert_eq!(h.admit(T0), Admission::Open, "charges go on");
        assert!(matches!(
            h.admit_refunds(T0),
            Admission::Wait {
                reason: "gateway key lacks the permission to refund",
                ..
            }
        ));
        assert_eq!(h.pause_problem(), None, "no readiness fault");
        assert_eq!(h.snapshot().forbidden, vec![Work::Refunds]);

        h.record(&GatewayOutcome::CredentialsFault { status: 403 }, T0);
        assert_eq!(
            h.holding_calls(),
            Some("gateway key lacks the permission to charge")
        );
        let later = T0 + Duration::from_secs(10);
        assert_eq!(h.admit(later), Admission::Probe);
        h.record(&success(), later);
        assert_eq!(h.admit(later), Admission::Open, "granted: charges again");
        assert_eq!(
            h.admit_refunds(later),
            Admission::Probe,
            "a charge proves nothing about refunds"
        );
        h.record_refund(
            &RefundOutcome::Refused {
                reason: "over what is left".into(),
            },
            later,
        );
        assert_eq!(h.admit_refunds(later), Admission::Open);
        assert!(h.snapshot().forbidden.is_empty());
    }

    #[test]
    fn a_401_on_a_refund_pauses_every_call_and_a_403_on_a_lookup_is_no_readiness_fault() {
        let h = health();
        h.record_lookup(&LookupOutcome::CredentialsFault { status: 403 }, T0);
        assert_eq!(h.pause_problem(), None);
        assert_eq!(h.admit(T0), Admission::Open);
        h.record_refund(&RefundOutcome::ConfigurationFault { status: 401 }, T0);
        assert!(matches!(
            h.admit(T0),
            Admission::Wait {
                reason: "gateway credentials rejected",
                ..
            }
        ));
        assert!(matches!(h.admit_refunds(T0), Admission::Wait { .. }));
        assert!(h.pause_problem().is_some());
    }
}
