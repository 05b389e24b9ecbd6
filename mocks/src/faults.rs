//! The seeded dice behind random faults, latency and charge ids.

use std::time::Duration;

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::config::{FaultConfig, FaultKind, FaultRule};
use crate::refund::RefundStatus;

/// Decides which random or counted fault a charging request gets.
///
/// The configuration and the generator sit under one lock so that counts are consumed
/// exactly once under concurrency, and a sequential run with the same seed draws the same
/// faults.
pub(crate) struct FaultInjector {
    state: Mutex<InjectorState>,
}

struct InjectorState {
    config: FaultConfig,
    rng: StdRng,
}

impl FaultInjector {
    pub(crate) fn new(config: FaultConfig, seed: u64) -> Self {
        FaultInjector {
            state: Mutex::new(InjectorState {
                config,
                rng: StdRng::seed_from_u64(seed),
            }),
        }
    }

    pub(crate) fn config(&self) -> FaultConfig {
        self.state.lock().config.clone()
    }

    /// Replaces the configuration; the generator keeps its position so a run stays one stream.
    pub(crate) fn set(&self, config: FaultConfig) {
        self.state.lock().config = config;
    }

    /// The latency for one request: fixed plus jitter.
    pub(crate) fn latency(&self) -> Duration {
        let mut state = self.state.lock();
        let latency = state.config.latency;
        let jitter = if latency.jitter_ms > 0 {
            state.rng.gen_range(0..=latency.jitter_ms)
        } else {
            0
        };
        Duration::from_millis(latency.fixed_ms.saturating_add(jitter))
    }

    /// The fault for one charging request, checking kinds in a fixed order
    /// (rate_limit, error_before, error_after, hang_after, drop_after, slow_charge) and stopping at the
    /// first that fires, so at most one count is consumed per request.
    pub(crate) fn draw(&self) -> Option<FaultKind> {
        let mut guard = self.state.lock();
        let InjectorState { config, rng } = &mut *guard;
        first_firing(
            rng,
            [
                (FaultKind::RateLimit, &mut config.rate_limit),
                (FaultKind::ErrorBefore, &mut config.error_before),
                (FaultKind::ErrorAfter, &mut config.error_after),
                (FaultKind::HangAfter, &mut config.hang_after),
                (FaultKind::DropAfter, &mut config.drop_after),
                (FaultKind::SlowCharge, &mut config.slow_charge),
            ],
        )
    }

    /// The fault for one refunding request, from the refunds' own rules, in the charges'
    /// order ([`FaultInjector::draw`]).
    pub(crate) fn draw_refund(&self) -> Option<FaultKind> {
        let mut guard = self.state.lock();
        let InjectorState { config, rng } = &mut *guard;
        let refunds = &mut config.refunds;
        first_firing(
            rng,
            [
                (FaultKind::RateLimit, &mut refunds.rate_limit),
                (FaultKind::ErrorBefore, &mut refunds.error_before),
                (FaultKind::ErrorAfter, &mut refunds.error_after),
                (FaultKind::HangAfter, &mut refunds.hang_after),
                (FaultKind::DropAfter, &mut refunds.drop_after),
                (FaultKind::SlowRefund, &mut refunds.slow_refund),
            ],
        )
    }

    /// The fault for one refund lookup that would answer `200`: `rate_limit`
    /// (`lookup_rate_limit`), `error_before` (`lookup_error`), `hang_after` (`lookup_hang`),
    /// `drop_after` (`lookup_drop`), checked in that order.
    pub(crate) fn draw_refund_lookup(&self) -> Option<FaultKind> {
        let mut guard = self.state.lock();
        let InjectorState { config, rng } = &mut *guard;
        let refunds = &mut config.refunds;
        first_firing(
            rng,
            [
                (FaultKind::RateLimit, &mut refunds.lookup_rate_limit),
                (FaultKind::ErrorBefore, &mut refunds.lookup_error),
                (FaultKind::HangAfter, &mut refunds.lookup_hang),
                (FaultKind::DropAfter, &mut refunds.lookup_drop),
            ],
        )
    }

    /// How a new refund starts when its charge's card does not say: `pending`,
    /// `requires_action` (only when the dialect has it) or `failed`, checked in that order;
    /// `None` is at once `succeeded`.
    pub(crate) fn draw_refund_start(&self, requires_action: bool) -> Option<RefundStatus> {
        let mut guard = self.state.lock();
        let InjectorState { config, rng } = &mut *guard;
        let refunds = &mut config.refunds;
        let mut never = FaultRule::default();
        let requires_action_rule = if requires_action {
            &mut refunds.requires_action
        } else {
            &mut never
        };
        first_firing(
            rng,
            [
                (RefundStatus::Pending, &mut refunds.pending),
                (RefundStatus::RequiresAction, requires_action_rule),
                (RefundStatus::Failed, &mut refunds.failed),
            ],
        )
    }
}

/// The first of `rules` that fires, consuming its count if it has one; at most one fires.
fn first_firing<T, const N: usize>(rng: &mut StdRng, rules: [(T, &mut FaultRule); N]) -> Option<T> {
    for (kind, rule) in rules {
        if rule.count > 0 {
            rule.count -= 1;
            return Some(kind);
        }
        // Draw only for enabled kinds, so switching one kind on does not shift the
        // stream of the others.
        if rule.probability > 0.0 && rng.gen::<f64>() < rule.probability {
            return Some(kind);
        }
    }
    None
}

/// Charge ids from their own seeded stream, independent of the fault dice.
pub(crate) struct ChargeIds {
    rng: Mutex<StdRng>,
}

impl ChargeIds {
    pub(crate) fn new(seed: u64) -> Self {
        ChargeIds {
            rng: Mutex::new(StdRng::seed_from_u64(seed ^ 0x6368_6172_6765_6964)),
        }
    }

    pub(crate) fn next(&self) -> String {
        self.next_with_prefix("ch")
    }

    /// An id of another kind of object (`pi`, `cus`) from the same stream.
    pub(crate) fn next_with_prefix(&self, prefix: &str) -> String {
        let bits: u128 = self.rng.lock().gen::<u128>() >> 32;
        format!("{prefix}_{bits:024x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RefundFaults;

    #[test]
    fn counted_faults_fire_exactly_count_times_in_a_fixed_order() {
        let injector = FaultInjector::new(
            FaultConfig {
                error_after: FaultRule::times(1),
                rate_limit: FaultRule::times(2),
                ..FaultConfig::default()
            },
            7,
        );
        let drawn: Vec<_> = (0..4).map(|_| injector.draw()).collect();
        assert_eq!(
            drawn,
            [
                Some(FaultKind::RateLimit),
                Some(FaultKind::RateLimit),
                Some(FaultKind::ErrorAfter),
                None
            ]
        );
        assert_eq!(injector.config().rate_limit.count, 0);
    }

    #[test]
    fn refund_faults_are_their_own_and_leave_the_charges_counts_alone() {
        let injector = FaultInjector::new(
            FaultConfig {
                error_after: FaultRule::times(1),
                refunds: RefundFaults {
                    error_after: FaultRule::times(1),
                    slow_refund: FaultRule::times(1),
                    lookup_hang: FaultRule::times(1),
                    requires_action: FaultRule::times(1),
                    failed: FaultRule::times(1),
                    ..RefundFaults::default()
                },
                ..FaultConfig::default()
            },
            7,
        );

        assert_eq!(injector.draw_refund(), Some(FaultKind::ErrorAfter));
        assert_eq!(injector.draw_refund(), Some(FaultKind::SlowRefund));
        assert_eq!(injector.draw_refund(), None);
        assert_eq!(injector.draw_refund_lookup(), Some(FaultKind::HangAfter));
        assert_eq!(injector.draw_refund_lookup(), None);
        // A dialect without `requires_action` never draws it, nor uses up its count.
        assert_eq!(
            injector.draw_refund_start(false),
            Some(RefundStatus::Failed)
        );
        assert_eq!(
            injector.draw_refund_start(true),
            Some(RefundStatus::RequiresAction)
        );
        assert_eq!(injector.draw_refund_start(true), None);
        assert_eq!(injector.draw(), Some(FaultKind::ErrorAfter), "untouched");
    }

    #[test]
    fn the_same_seed_draws_the_same_faults_and_ids() {
        let config = FaultConfig {
            error_before: FaultRule::probability(0.5),
            ..FaultConfig::default()
        };
        let draws = |seed| {
            let injector = FaultInjector::new(config.clone(), seed);
            let ids = ChargeIds::new(seed);
            (0..32)
                .map(|_| (injector.draw(), ids.next()))
                .collect::<Vec<_>>()
        };
        assert_eq!(draws(42), draws(42));
        assert_ne!(draws(42), draws(43));
    }
}
