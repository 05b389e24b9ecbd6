//! A log-normal gateway latency: real card gateways answer in a few hundred milliseconds
//! with a long tail, which a constant latency cannot show.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, LogNormal};

/// The standard normal quantile at 0.99: a log-normal's p99 is `exp(mu + Z99 * sigma)`.
const Z99: f64 = 2.3263;

/// A log-normal latency given by its median and p99, drawn from its own seeded stream.
///
/// `mu = ln(median)`, `sigma = (ln(p99) - ln(median)) / 2.3263`. A p99 equal to the median
/// is a constant latency; a p99 below it, or a zero median, is refused by
/// [`LatencyDistribution::log_normal`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LatencyDistribution {
    median: Duration,
    p99: Duration,
    seed: u64,
}

impl LatencyDistribution {
    /// The distribution with this median and p99, drawn with `seed`; an error says what
    /// to change when the two cannot describe a log-normal.
    pub fn log_normal(median: Duration, p99: Duration, seed: u64) -> Result<Self, String> {
        if median.is_zero() {
            return Err("the latency median must be above zero".to_owned());
        }
        if p99 < median {
            return Err(format!(
                "the latency p99 ({}) must not be below the median ({})",
                humantime::format_duration(p99),
                humantime::format_duration(median)
            ));
        }
        Ok(LatencyDistribution { median, p99, seed })
    }

    /// The median (half the draws are shorter).
    pub fn median(&self) -> Duration {
        self.median
    }

    /// The 99th percentile.
    pub fn p99(&self) -> Duration {
        self.p99
    }

    /// The seed of the latency stream (independent of the fault dice).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// `mu`, in log-seconds.
    pub fn mu(&self) -> f64 {
        self.median.as_secs_f64().ln()
    }

    /// `sigma`, in log-seconds.
    pub fn sigma(&self) -> f64 {
        (self.p99.as_secs_f64().ln() - self.mu()) / Z99
    }

    /// The mean, `exp(mu + sigma² / 2)`: above the median, pulled up by the tail.
    pub fn mean(&self) -> Duration {
        Duration::from_secs_f64((self.mu() + self.sigma().powi(2) / 2.0).exp())
    }
}

impl std::fmt::Display for LatencyDistribution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "log-normal median {} p99 {} (mu {:.4}, sigma {:.4} in ln seconds; mean {:.1} ms) seed {}",
            humantime::format_duration(self.median),
            humantime::format_duration(self.p99),
            self.mu(),
            self.sigma(),
            self.mean().as_secs_f64() * 1000.0,
            self.seed
        )
    }
}

/// What the gateway drew from its latency distribution so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LatencyDrawn {
    /// How many requests drew a latency.
    pub draws: u64,
    /// The sum of the drawn latencies.
    pub total: Duration,
}

impl LatencyDrawn {
    /// The observed mean, `None` before the first draw.
    pub fn mean(&self) -> Option<Duration> {
        u32::try_from(self.draws)
            .ok()
            .filter(|&draws| draws > 0)
            .map(|draws| self.total / draws)
    }
}

/// Draws latencies from a [`LatencyDistribution`] and counts what it drew.
pub(crate) struct LatencySampler {
    distribution: LogNormal<f64>,
    rng: Mutex<StdRng>,
    draws: AtomicU64,
    total_micros: AtomicU64,
}

impl LatencySampler {
    pub(crate) fn new(distribution: &LatencyDistribution) -> Self {
        LatencySampler {
            distribution: LogNormal::new(distribution.mu(), distribution.sigma())
                .expect("LatencyDistribution::log_normal admits only a finite, non-negative sigma"),
            rng: Mutex::new(StdRng::seed_from_u64(distribution.seed)),
            draws: AtomicU64::new(0),
            total_micros: AtomicU64::new(0),
        }
    }

    /// One latency; a draw too long for a `Duration` (never, for a sane p99) saturates.
    pub(crate) fn draw(&self) -> Duration {
        let secs = self.distribution.sample(&mut *self.rng.lock());
        let latency = Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX);
        self.draws.fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.total_micros.fetch_add(micros, Ordering::Relaxed);
        latency
    }

    pub(crate) fn drawn(&self) -> LatencyDrawn {
        LatencyDrawn {
            draws: self.draws.load(Ordering::Relaxed),
            total: Duration::from_micros(self.total_micros.load(Ordering::Relaxed)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    /// The `q` quantile of sorted draws, in milliseconds.
    fn quantile(sorted: &[Duration], q: f64) -> f64 {
        let index = ((sorted.len() as f64) * q) as usize;
        sorted[index.min(sorted.len() - 1)].as_secs_f64() * 1000.0
    }

    fn within(observed: f64, expected: f64, tolerance: f64) -> bool {
        (observed - expected).abs() <= expected * tolerance
    }

    #[test]
    fn a_seeded_sample_has_the_configured_median_p99_and_mean() {
        let distribution = LatencyDistribution::log_normal(ms(300), ms(1500), 7).unwrap();
        let sampler = LatencySampler::new(&distribution);
        let mut draws: Vec<Duration> = (0..100_000).map(|_| sampler.draw()).collect();
        draws.sort();

        let median = quantile(&draws, 0.5);
        let p99 = quantile(&draws, 0.99);
        assert!(
            within(median, 300.0, 0.03),
            "median {median} ms, wanted 300 ms"
        );
        assert!(within(p99, 1500.0, 0.05), "p99 {p99} ms, wanted 1500 ms");
        let expected_mean = distribution.mean().as_secs_f64() * 1000.0;
        let observed_mean = sampler.drawn().mean().unwrap().as_secs_f64() * 1000.0;
        assert!(
            within(observed_mean, expected_mean, 0.03),
            "observed mean {observed_mean} ms, formula {expected_mean} ms"
        );
        assert_eq!(sampler.drawn().draws, 100_000);
    }

    #[test]
    fn the_same_seed_draws_the_same_latencies_and_another_seed_does_not() {
        let draws = |seed| {
            let distribution = LatencyDistribution::log_normal(ms(300), ms(1500), seed).unwrap();
            let sampler = LatencySampler::new(&distribution);
            (0..32).map(|_| sampler.draw()).collect::<Vec<_>>()
        };
        assert_eq!(draws(7), draws(7));
        assert_ne!(draws(7), draws(8));
    }

    #[test]
    fn the_mean_follows_exp_mu_plus_half_sigma_squared() {
        let distribution = LatencyDistribution::log_normal(ms(300), ms(1500), 0).unwrap();
        let sigma = (1.5f64.ln() - 0.3f64.ln()) / 2.3263;
        assert!((distribution.sigma() - sigma).abs() < 1e-12);
        let mean = (0.3f64.ln() + sigma * sigma / 2.0).exp();
        assert!((distribution.mean().as_secs_f64() - mean).abs() < 1e-9);
    }

    #[test]
    fn a_p99_equal_to_the_median_is_a_constant_latency() {
        let distribution = LatencyDistribution::log_normal(ms(200), ms(200), 1).unwrap();
        let sampler = LatencySampler::new(&distribution);
        for _ in 0..100 {
            let drawn = sampler.draw().as_secs_f64() * 1000.0;
            assert!(within(drawn, 200.0, 1e-6), "drew {drawn} ms");
        }
    }

    #[test]
    fn a_p99_below_the_median_or_a_zero_median_is_refused_with_what_to_change() {
        let err = LatencyDistribution::log_normal(ms(300), ms(100), 0).unwrap_err();
        assert_eq!(
            err,
            "the latency p99 (100ms) must not be below the median (300ms)"
        );
        let err = LatencyDistribution::log_normal(Duration::ZERO, ms(100), 0).unwrap_err();
        assert_eq!(err, "the latency median must be above zero");
    }
}
