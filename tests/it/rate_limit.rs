//! The fleet-wide gateway rate limit (`gateway_max_rate`): the bucket's arithmetic (pure),
//! the database bucket against it, two limiters sharing one bucket, and the executor and
//! reconciler taking permits before they claim.

use std::time::{Duration, Instant};

use onecharge::config::Settings;
use onecharge::gateway::GatewayKind;
use onecharge::gateway_access::limit::{
    bucket_name, default_burst, lease_size, requests_per_charge, time_until, wait_target, Bucket,
    GatewayRateLimit, Lease, Take,
};
use onecharge::store::rate_limit::take_tokens;
use onecharge::store::Store;
use time::OffsetDateTime;

use crate::support::harness::Harness;
use crate::support::throwaway::ThrowawayDatabase;
use crate::support::Records;

/// A small deterministic stream of numbers in [0, 1) (no dependency for a test's dice).
struct Dice(u64);

impl Dice {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[test]
fn a_bucket_never_hands_out_more_than_burst_plus_rate_times_any_window() {
    let (rate, burst) = (200.0, 10);
    let mut dice = Dice(14);
    let mut bucket = Bucket::full(burst, 0.0);
    let mut now = 0.0;
    let mut grants = Vec::new();
    for _ in 0..5_000 {
        now += dice.next() * 0.02;
        let want = 1 + (dice.next() * 12.0) as u32;
        let granted = bucket.take(now, want, rate, burst);
        grants.push((now, granted));
    }
    for (i, &(start, _)) in grants.iter().enumerate() {
        let mut handed_out = 0u32;
        for &(at, granted) in &grants[i..] {
            handed_out += granted;
            let bound = f64::from(burst) + rate * (at - start);
            assert!(
                f64::from(handed_out) <= bound + 1e-9,
                "{handed_out} tokens in {}s, bound {bound}",
                at - start
            );
        }
    }
    let total: u32 = grants.iter().map(|g| g.1).sum();
    assert!(
        f64::from(total) >= rate * now * 0.9,
        "asked for more than the rate all along, so nearly all of it is handed out: {total} in {now}s"
    );
}

#[test]
fn a_take_whose_clock_reading_is_older_than_the_last_refills_nothing_and_loses_nothing() {
    // Times in sixteenths of a second, exact in binary.
    let mut bucket = Bucket::full(10, 5.0);
    assert_eq!(bucket.take(5.0, 10, 80.0, 10), 10);
    // A take that read the clock before the previous one committed.
    assert_eq!(bucket.take(4.875, 10, 80.0, 10), 0);
    assert_eq!(bucket.at, 5.0, "refilled_at never moves back");
    // The 1/16 s since the last take is still there for the next one: 5 tokens.
    assert_eq!(bucket.take(5.0625, 10, 80.0, 10), 5);
}

#[test]
fn a_lease_spends_only_until_its_horizon_and_joining_never_extends_it() {
    let start = Instant::now();
    let mut lease = Lease::empty(start);
    lease.keep(4, start + Duration::from_millis(25), start);
    assert_eq!(lease.spend(3, start), 3);
    // Younger tokens join older ones: the older horizon holds for all.
    lease.keep(
        5,
        start + Duration::from_millis(40),
        start + Duration::from_millis(10),
    );
    assert_eq!(lease.tokens, 6);
    assert_eq!(lease.expires, start + Duration::from_millis(25));
    assert_eq!(
        lease.spend(6, start + Duration::from_millis(25)),
        0,
        "expired tokens are dropped, never spent"
    );
    assert_eq!(lease.tokens, 0);
}

#[test]
fn a_lease_is_what_the_caller_needs_up_to_the_bucket_plus_at_most_a_fortieth_of_a_second() {
    let (rate, burst) = (200.0, default_burst(200.0));
    assert_eq!(burst, 7, "1/30 s of the rate, rounded up");
    assert_eq!(
        lease_size(1, 0.0, rate, burst, 1),
        1,
        "no recent rate: no spare"
    );
    assert_eq!(lease_size(3, 150.0, rate, burst, 1), 4, "25 ms at 150/s");
    assert_eq!(
        lease_size(1, 10_000.0, rate, burst, 1),
        5,
        "spare capped at 1/40 s of the rate"
    );
    assert_eq!(
        lease_size(64, 0.0, rate, burst, 1),
        burst,
        "never more than the bucket holds"
    );
    assert_eq!(
        lease_size(1, 0.0, 5.0, 1, 2),
        2,
        "at least one stripe charge"
    );
    assert_eq!(default_burst(5.0), 1);
    assert_eq!(requests_per_charge(GatewayKind::Stripe), 2);
    assert_eq!(
        wait_target(10, 10, 1),
        5,
        "a waiter wakes with the bucket half full"
    );
    assert_eq!(time_until(2.0, 5, 200.0), Duration::from_millis(15));
    assert_eq!(time_until(7.0, 5, 200.0), Duration::from_millis(1));
}

#[test]
fn a_bucket_name_keeps_no_credentials_of_the_gateway_url() {
    let name = bucket_name(GatewayKind::Onecharge, "https://user:s3cret@gw.example/");
    assert_eq!(name, "onecharge https://gw.example/");
}

#[test]
fn gateway_max_rate_must_be_finite_and_not_negative_and_a_burst_needs_a_rate() {
    let error = |adjust: fn(&mut Settings)| {
        let mut settings = Settings::default();
        adjust(&mut settings);
        settings.validate().map_err(|e| e.0)
    };
    assert!(error(|s| s.gateway_max_rate = 0.0).is_ok());
    assert!(error(|s| s.gateway_max_rate = 0.5).is_ok());
    for bad in [-1.0, f64::NAN, f64::INFINITY] {
        let settings = Settings {
            gateway_max_rate: bad,
            ..Settings::default()
        };
        let message = settings.validate().unwrap_err().0;
        assert!(
            message.starts_with("gateway_max_rate (ONECHARGE_GATEWAY_MAX_RATE): must be"),
            "{message}"
        );
    }
    let message = error(|s| s.gateway_rate_burst = 5).unwrap_err();
    assert!(message.starts_with("gateway_rate_burst"), "{message}");
}

async fn store() -> (ThrowawayDatabase, Store) {
    let database = ThrowawayDatabase::new();
    drop(Store::setup(&database.url()).await.expect("test database"));
    let store = Store::connect(&database.url(), 8)
        .await
        .expect("test database pool");
    (database, store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_bucket_hands_out_what_the_pure_bucket_computes() {
    let (_database, store) = store().await;
    let (rate, burst) = (50.0, 5);
    let now = OffsetDateTime::now_utc();
    // Whole microseconds, as timestamptz keeps them.
    let start = now
        .replace_nanosecond(now.nanosecond() / 1000 * 1000)
        .unwrap();
    let mut model = Bucket::full(burst, 0.0);
    let mut dice = Dice(3);
    let mut micros = 0i64;
    let mut total = 0;
    for step in 0..200 {
        // Now and then a clock reading that predates the last take.
        micros += (dice.next() * 40_000.0) as i64 - if step % 17 == 16 { 30_000 } else { 0 };
        let at = start + time::Duration::microseconds(micros);
        let seconds = micros as f64 / 1e6;
        let want = 1 + (dice.next() * 6.0) as u32;
        let taken = take_tokens(
            &store,
            "onecharge test",
            rate,
            f64::from(burst),
            want,
            Some(at),
        )
        .await
        .expect("a take");
        let expected = model.take(seconds, want, rate, burst);
        assert_eq!(taken.granted, expected, "step {step}");
        assert!((taken.tokens - model.tokens).abs() < 1e-6, "step {step}");
        total += taken.granted;
    }
    assert!(total > 0);
    let left = store.bucket_tokens().await;
    assert!(
        (left - model.tokens).abs() < 1e-6,
        "the row holds what the model holds"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_limiters_on_one_database_never_hand_out_more_than_burst_plus_rate_times_the_window() {
    let (database, store) = store().await;
    let mut settings = Settings {
        database_url: database.url(),
        ..Settings::default()
    };
    settings.gateway_max_rate = 200.0;
    let name = bucket_name(settings.gateway_kind, &settings.gateway_url);
    let burst = f64::from(default_burst(settings.gateway_max_rate));
    // The window opens with the bucket's creation (full) and closes with a last take, both
    // on the database's clock.
    let opened = take_tokens(&store, &name, 200.0, burst, 0, None)
        .await
        .unwrap()
        .at;
    let limiters = [
        GatewayRateLimit::from_settings(store.clone(), &settings, GatewayKind::Onecharge),
        GatewayRateLimit::from_settings(
            Store::connect(&database.url(), 2).await.unwrap(),
            &settings,
            GatewayKind::Onecharge,
        ),
    ];
    let tasks = limiters.map(|limiter| {
        tokio::spawn(async move {
            let mut permitted = 0;
            while permitted < 150 {
                match limiter.for_charges(7).await {
                    Take::Granted(permits) => {
                        permitted += permits.count();
                        let used = permits.count();
                        permits.spend(used);
                    }
                    Take::Wait(wait) => tokio::time::sleep(wait).await,
                }
            }
            permitted
        })
    });
    let mut permitted = 0;
    for task in tasks {
        permitted += task.await.unwrap();
    }
    let closed = take_tokens(&store, &name, 200.0, burst, 0, None)
        .await
        .unwrap()
        .at;
    let window = (closed - opened).as_seconds_f64();
    let bound = burst + 200.0 * window;
    assert!(
        permitted as f64 <= bound,
        "{permitted} calls permitted in {window:.3}s of database time; bound {bound:.1}"
    );
    assert!(permitted >= 300, "both limiters got what they asked for");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_limit_of_five_a_second_one_executor_step_sends_at_most_five_of_twenty_due() {
    let harness = Harness::with_rate_limit(5.0, 5).await;
    let seeded = harness.seed_many(&["pm_card_visa"; 20]).await;
    assert_eq!(seeded.len(), 20);
    let report = harness.executor().run_once().await.unwrap();
    let sent = harness.gateway.ledger().len();
    assert!(
        (1..=5).contains(&sent),
        "the step sent {sent} charges; the bucket held 5"
    );
    assert_eq!(
        report.claimed(),
        sent,
        "only attempts with a permit were claimed"
    );
    let attempts = harness.all_attempts().await;
    let untouched = attempts
        .iter()
        .filter(|a| a.status == "pending" && a.tries == 0);
    assert_eq!(
        untouched.count(),
        20 - sent,
        "the rest wait pending, with no lease and no try spent"
    );
    assert_eq!(harness.all_gateway_calls().await.len(), sent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_without_a_limit_never_touches_the_bucket_table() {
    let harness = Harness::new().await;
    harness.seed_many(&["pm_card_visa"; 3]).await;
    let report = harness.executor().run_once().await.unwrap();
    assert_eq!(report.claimed(), 3);
    assert_eq!(harness.gateway.ledger().len(), 3);
    let buckets = harness.rows_in("gateway_rate_buckets").await;
    assert_eq!(buckets, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emptied_bucket_makes_the_executor_and_the_reconciler_wait_without_claiming() {
    let harness = Harness::with_rate_limit(0.01, 1).await;
    harness.seed_many(&["pm_card_visa"; 2]).await;
    let executor = harness.executor();
    let first = executor.run_once().await.unwrap();
    assert_eq!(first.claimed(), 1, "the one token of the bucket");
    // The bucket refills one token every 100 s: the next step finds none.
    let second = executor.run_once().await.unwrap();
    assert_eq!(second.claimed(), 0);
    assert_eq!(harness.gateway.ledger().len(), 1);
    // An unknown attempt due for lookup waits the same way, unclaimed.
    harness
        .set_attempts_in(
            "pending",
            "status = 'unknown', next_run_at = now() - interval '1 s'",
        )
        .await;
    let pass = harness.reconciler().run_once().await.unwrap();
    assert!(pass.resolutions.is_empty());
    assert!(pass.rate_limited.is_some_and(|wait| wait > Duration::ZERO));
    assert_eq!(harness.gateway_calls_of("lookup").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stripe_cancel_after_requires_action_takes_a_permit_and_without_one_is_not_sent() {
    // One charge's worth in the bucket (a Stripe charge is two requests), refilled one
    // token a hundred seconds: the create and the confirm spend it all.
    let harness = Harness::with(
        mock_gateway::MockConfig {
            dialect: mock_gateway::Dialect::Stripe,
            ..mock_gateway::MockConfig::default()
        },
        |s| {
            s.gateway_kind = GatewayKind::Stripe;
            s.gateway_max_rate = 0.01;
            s.gateway_rate_burst = 2;
        },
    )
    .await;
    let id = harness
        .seed(mock_gateway::stripe::payment_methods::FAULT_REQUIRES_ACTION)
        .await
        .payment_attempt_id;
    let client = onecharge::gateway::GatewayClient::from_settings(&harness.settings).unwrap();

    harness.executor_with(client).run_once().await.unwrap();

    let cancels = harness
        .gateway
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/cancel"))
        .count();
    assert_eq!(cancels, 0, "a third request with two tokens taken");
    let row = harness.attempt(id).await;
    assert_eq!(
        row.status, "needs_review",
        "left for a person, who cancels it at Stripe"
    );
}

/// A failover to a database host whose clock runs an hour behind: the bucket's last refill
/// is an hour "in the future" for every take after it. The refill stops for at most
/// a second (`store::rate_limit::MAX_CLOCK_STEP_BACK`), not for the hour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_clock_stepping_back_an_hour_stops_the_refill_for_at_most_a_moment() {
    let (_database, store) = store().await;
    let (rate, burst) = (1.0, 5.0);
    let take = |want: u32, at: OffsetDateTime| {
        let store = store.clone();
        async move {
            take_tokens(&store, "onecharge test", rate, burst, want, Some(at))
                .await
                .expect("a take")
                .granted
        }
    };
    let before = OffsetDateTime::now_utc();
    assert_eq!(take(5, before).await, 5, "the full bucket");

    let behind = before - time::Duration::hours(1);
    assert_eq!(take(5, behind).await, 0, "nothing refilled by a step back");
    // Ten seconds later on the new clock, ten seconds of refill (capped at the burst).
    assert_eq!(take(5, behind + time::Duration::seconds(10)).await, 5);

    // The pure bucket does the same.
    let mut model = Bucket::full(5, 3600.0);
    assert_eq!(model.take(3600.0, 5, rate, 5), 5);
    assert_eq!(model.take(0.0, 5, rate, 5), 0);
    assert_eq!(model.take(10.0, 5, rate, 5), 5);
}
