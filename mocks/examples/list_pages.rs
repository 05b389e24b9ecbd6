//! What the mock takes to build a page of its §3 list at the start, in the middle and at the
//! end of a long listing: a page should cost the same wherever it falls.
//!
//! For each `--charges` N, a gateway in this process whose ledger holds N charges created at
//! one instant (so the list's order is the ids', drawn at random, and the ledger holds them
//! in no order), asked over loopback for the window's first page, its second, the page in
//! its middle and its last, in turn, `--rounds` times each. It prints the mock's own time to
//! build each ([`MockGateway::list_page_times`]): the median and the 90th percentile.
//!
//! ```text
//! cargo run --release -p mock-gateway --example list_pages -- --charges 20000,1000000
//! ```

use std::time::Duration;

use anyhow::ensure;
use clap::Parser;
use mock_gateway::{Charge, ChargeStatus, MockConfig, MockGateway, PAGE_TIMES_KEPT};
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

#[derive(Debug, Parser)]
#[command(about = "Print the mock's time to build a list page at each place in a long listing")]
struct Args {
    /// Charges in the ledger, one run each.
    #[arg(long, value_delimiter = ',', default_values_t = vec![20_000usize, 1_000_000])]
    charges: Vec<usize>,
    /// Times each page is asked for.
    #[arg(long, default_value_t = 200)]
    rounds: usize,
}

/// The pages asked for, by where they fall.
const PLACES: [&str; 4] = ["first", "second", "middle", "last"];

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    ensure!(
        args.rounds * PLACES.len() <= PAGE_TIMES_KEPT,
        "at most {} rounds: the mock keeps the last {PAGE_TIMES_KEPT} pages' times",
        PAGE_TIMES_KEPT / PLACES.len()
    );
    // reqwest is built without a TLS provider of its own (the workspace installs ring).
    let _ = rustls::crypto::ring::default_provider().install_default();
    println!(
        "the mock's time to build a page of 100, median (90th percentile), {} rounds",
        args.rounds
    );
    println!("| charges | first page | second | middle | last |");
    println!("|---:|---:|---:|---:|---:|");
    for &charges in &args.charges {
        ensure!(
            charges >= 200,
            "at least 200 charges: two pages and a last one"
        );
        println!("{}", run(charges, args.rounds).await?);
    }
    Ok(())
}

/// One ledger size: its row of the table.
async fn run(charges: usize, rounds: usize) -> anyhow::Result<String> {
    let config = MockConfig::default();
    let api_key = config.api_key.clone();
    let gateway = MockGateway::start(config).await?;
    let created_at = OffsetDateTime::now_utc() - Duration::from_secs(600);
    let mut rng = StdRng::seed_from_u64(35);
    let ledger: Vec<Charge> = (0..charges)
        .map(|_| Charge {
            id: format!("ch_{:032x}", rng.gen::<u128>()),
            status: ChargeStatus::Succeeded,
            amount_minor: 1000,
            currency: "EUR".into(),
            customer_id: "cus_bench".into(),
            payment_method: "pm_card_visa".into(),
            reference: format!("{:032x}", rng.gen::<u128>()),
            idempotency_key: format!("onecharge:{:032x}", rng.gen::<u128>()),
            decline_code: None,
            created_at,
            metadata: Default::default(),
        })
        .collect();
    let mut ids: Vec<String> = ledger.iter().map(|charge| charge.id.clone()).collect();
    gateway.record_charges(ledger);
    ids.sort_unstable();
    // The cursor of each page: none for the first, then the last id of the page before.
    let cursors = [
        None,
        Some(ids[99].clone()),
        Some(ids[charges / 2].clone()),
        Some(ids[charges - 101].clone()),
    ];
    let window = |at: OffsetDateTime| at.format(&Rfc3339).expect("a time formats");
    let (from, to) = (
        window(created_at - Duration::from_secs(3600)),
        window(created_at + Duration::from_secs(3600)),
    );
    let client = reqwest::Client::new();
    let url = format!("{}/v1/charges", gateway.base_url());
    for _ in 0..rounds {
        for cursor in &cursors {
            let mut query = vec![
                ("created_gte", from.clone()),
                ("created_lt", to.clone()),
                ("limit", "100".to_owned()),
            ];
            query.extend(cursor.clone().map(|id| ("starting_after", id)));
            let answer = client
                .get(&url)
                .bearer_auth(&api_key)
                .query(&query)
                .send()
                .await?
                .error_for_status()?;
            answer.bytes().await?;
        }
    }
    let times = gateway.list_page_times();
    let asked = &times.last[times.last.len() - rounds * PLACES.len()..];
    let mut row = format!("| {charges} |");
    for place in 0..PLACES.len() {
        let mut took: Vec<Duration> = asked
            .iter()
            .skip(place)
            .step_by(PLACES.len())
            .copied()
            .collect();
        took.sort_unstable();
        let micros = |at: usize| took[at].as_secs_f64() * 1e6;
        row.push_str(&format!(
            " {:.0} µs ({:.0} µs) |",
            micros(took.len() / 2),
            micros(took.len() * 9 / 10)
        ));
    }
    gateway.shutdown().await;
    Ok(row)
}
