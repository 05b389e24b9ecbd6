//! The PostgreSQL failover drills (issue 56): the soak's commands, refunds, gateway faults
//! and SIGKILLed serve processes, against a Patroni cluster of the test's own
//! (`tests/it/support/patroni.rs`: etcd, three PostgreSQL nodes, HAProxy routing the one
//! address onecharge has to the node that answers `/primary`), and one database fault
//! mid-run: the leader's node lost, a planned switchover, the only synchronous standby lost
//! under `synchronous_mode_strict`, the leader lost while an etcd member is down, the leader
//! cut off from etcd (a network namespace) while onecharge still reaches it, and — without
//! synchronous replication — the leader lost ahead of its replicas.
//!
//! The soak's verifier judges every run (every acknowledged command recorded, which the
//! stream audit must agree with; no charge or refund twice; every final state announced
//! once); [`gates`] adds the failover's own: a new leader, a charge settled on it, `/readyz`
//! ready again, nothing in review that a person would not expect. [`FailoverReport`] is what
//! a team sees: how long from the fault to the first charge settled on the new leader, what
//! the readiness probe said, what onecharge logged meanwhile.
//!
//! The leader-lost drill is a default test (about 90 s); the rest are `#[ignore]`d
//! (docs/soak.md, "The PostgreSQL failover drills").

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use crate::mix::Plan;
use crate::runner::SoakConfig;
use crate::support::patroni::{tools_or_skip, PatroniCluster, PatroniOptions};
use crate::support::Records as _;
use crate::verify::{Observed, Problem};
use crate::{seed, short_soak};

/// One drill: the cluster it needs and the fault it makes.
#[derive(Debug, Clone)]
pub struct Drill {
    pub options: PatroniOptions,
    pub fault: Fault,
    /// When the fault comes, as a share of the publishing time.
    pub at: f64,
}

/// The database faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL of the leader's Patroni and PostgreSQL (its host lost); it rejoins later.
    LeaderLost,
    /// `patronictl switchover` to the synchronous standby.
    Switchover,
    /// `synchronous_mode_strict` on two nodes: the one replica, the synchronous standby, is
    /// lost for this long, then comes back. (On three nodes the other replica takes over at
    /// once: in strict mode Patroni sets `synchronous_standby_names = '*'`, which any
    /// streaming replica satisfies, even one tagged `nosync`.)
    OnlySyncStandbyLost(Duration),
    /// etcd member 0 of three SIGKILLed, then the leader's node lost.
    LeaderLostWithEtcdMemberDown,
    /// The leader (in its network namespace) loses etcd; HAProxy and onecharge still reach
    /// it. Healed once a new leader took charges.
    LeaderCutOffFromEtcd,
    /// Replication cut for a few seconds (the forwarders), then the leader lost: what it
    /// committed alone is gone.
    LeaderLostAheadOfItsReplicas,
}

impl Fault {
    /// Whether the fault moves the leader (all but the lost standby).
    fn moves_the_leader(self) -> bool {
        !matches!(self, Fault::OnlySyncStandbyLost(_))
    }
}

/// Where the drill watches onecharge from.
pub struct Watch {
    /// `/readyz` and `/metrics` of serve process 0, which the soak never kills.
    pub admin: String,
    /// The serve processes' logs.
    pub log_dir: std::path::PathBuf,
}

/// What a team saw during the fault.
#[derive(Debug, Default)]
pub struct FailoverReport {
    pub fault: String,
    pub old_leader: String,
    pub new_leader: Option<String>,
    /// Seconds after the fault, with what happened.
    pub timeline: Vec<(f64, String)>,
    /// Seconds from the fault until another node answered `/primary`.
    pub new_primary_after: Option<f64>,
    /// … until HAProxy routed a new connection to it, writable.
    pub routed_after: Option<f64>,
    /// … until the first charge settled (`succeeded`) on the new leader, or on the leader
    /// once the lost standby was back.
    pub first_settled_after: Option<f64>,
    /// `/readyz` of serve process 0, each time it changed: seconds, what it said.
    pub readiness: Vec<(f64, String)>,
    /// `onecharge_database_failover` of serve process 0 (1 while the database refuses or
    /// drops writes as in a failover), each time it changed.
    pub failover_gauge: Vec<(f64, String)>,
    /// Warnings and errors the serve processes logged from the fault to the first settled
    /// charge: how many of each, most first.
    pub logged: Vec<(usize, String)>,
    /// Most sessions seen waiting for a synchronous standby at once (`SyncRep`).
    pub most_commits_waiting: i64,
    /// The leader's log lines that say a wait for the synchronous standby was cancelled and
    /// the commit kept locally only.
    pub local_only_commits: usize,
    /// Without synchronous replication: what the new leader lacks.
    pub loss: Option<Loss>,
}

/// The commands an asynchronous failover lost, and the stream audit's view of them.
#[derive(Debug, Default)]
pub struct Loss {
    /// Valid commands (charges and refunds) acknowledged by intake that the new leader has
    /// no dedupe row for, by message id.
    pub lacking: Vec<String>,
    /// What `onecharge intake audit` named.
    pub audit_named: Vec<String>,
    /// Findings replayed with `intake audit --replay`.
    pub replayed: usize,
}

impl FailoverReport {
    fn note(&mut self, started: Instant, what: impl Into<String>) {
        let what = what.into();
        let at = started.elapsed().as_secs_f64();
        println!("  [failover +{at:>5.1}s] {what}");
        self.timeline.push((at, what));
    }

    /// The report, as docs/operations.md quotes it.
    pub fn print(&self) {
        println!("failover drill: {}", self.fault);
        println!(
            "  leader                    {} → {}",
            self.old_leader,
            self.new_leader.as_deref().unwrap_or("(the same)")
        );
        let secs = |s: Option<f64>| s.map_or_else(|| "-".to_owned(), |s| format!("{s:.1} s"));
        println!(
            "  after the fault           new primary {}, HAProxy routed to it {}, first charge settled {}",
            secs(self.new_primary_after),
            secs(self.routed_after),
            secs(self.first_settled_after)
        );
        for (at, what) in &self.timeline {
            println!("    +{at:>5.1}s {what}");
        }
        println!("  /readyz of serve 0");
        for (at, what) in &self.readiness {
            println!("    +{at:>5.1}s {what}");
        }
        println!("  onecharge_database_failover of serve 0");
        for (at, what) in &self.failover_gauge {
            println!("    +{at:>5.1}s {what}");
        }
        println!(
            "  commits waiting for a sync standby (most at once) {}; commits kept locally only (wait cancelled) {}",
            self.most_commits_waiting, self.local_only_commits
        );
        println!(
            "  logged by the serve processes from the fault to the first settled charge: {} warnings and errors",
            self.logged.iter().map(|(n, _)| n).sum::<usize>()
        );
        if self.logged.is_empty() {
            println!("    nothing");
        }
        for (count, line) in self.logged.iter().take(15) {
            println!("    {count:>5} × {line}");
        }
        if let Some(loss) = &self.loss {
            println!(
                "  acknowledged commands the new leader lacks {}; named by the stream audit {}; replayed {}",
                loss.lacking.len(),
                loss.audit_named.len(),
                loss.replayed
            );
        }
    }
}

/// The cluster a drill runs on, or `None` (and SKIPPED) where the tools are missing.
pub async fn start_cluster(drill: &Drill) -> PatroniCluster {
    PatroniCluster::start(drill.options.clone()).await
}

/// Makes the fault and follows the failover to its end (the old leader back as a
/// replica, the standby or etcd member back), while the soak goes on. Returns the cluster
/// and what was seen.
pub async fn make_fault(
    mut cluster: PatroniCluster,
    fault: Fault,
    watch: Watch,
) -> (PatroniCluster, FailoverReport) {
    let mut report = FailoverReport {
        fault: format!("{fault:?}"),
        ..FailoverReport::default()
    };
    let old = cluster.primary().await.expect("a primary before the fault");
    report.old_leader = old.clone();
    let stop_watching = CancellationToken::new();
    let started = Instant::now();
    let fault_at = OffsetDateTime::now_utc();
    let watcher = tokio::spawn(watch_serve(
        watch.admin.clone(),
        started,
        stop_watching.clone(),
    ));
    let waits = tokio::spawn(watch_sync_waits(
        cluster.node(&old).url("postgres"),
        stop_watching.clone(),
    ));
    match fault {
        Fault::LeaderLost => {
            report.note(
                started,
                format!("SIGKILL of {old}'s Patroni and PostgreSQL"),
            );
            cluster.kill_node(&old);
        }
        Fault::Switchover => {
            let candidate = cluster.sync_standby().await.expect("a sync standby");
            report.note(
                started,
                format!("patronictl switchover --leader {old} --candidate {candidate}"),
            );
            let printed = tokio::task::block_in_place(|| cluster.switchover(&old, &candidate));
            report.note(
                started,
                format!(
                    "patronictl returned: {}",
                    printed.lines().last().unwrap_or_default()
                ),
            );
        }
        Fault::LeaderLostWithEtcdMemberDown => {
            report.note(started, "SIGKILL of etcd member e0 (of 3)");
            cluster.kill_etcd(0);
            tokio::time::sleep(Duration::from_secs(2)).await;
            report.note(
                started,
                format!("SIGKILL of {old}'s Patroni and PostgreSQL"),
            );
            cluster.kill_node(&old);
        }
        Fault::LeaderCutOffFromEtcd => {
            report.note(
                started,
                format!("{old} cut off from etcd (blackhole route in its network namespace)"),
            );
            cluster.cut_from_etcd(true);
        }
        Fault::LeaderLostAheadOfItsReplicas => {
            report.note(started, "replication cut (the forwarders point nowhere)");
            cluster.cut_replication(true);
            tokio::time::sleep(Duration::from_secs(3)).await;
            report.note(
                started,
                format!("SIGKILL of {old}'s Patroni and PostgreSQL"),
            );
            cluster.kill_node(&old);
            cluster.cut_replication(false);
        }
        Fault::OnlySyncStandbyLost(down) => {
            let standby = cluster.sync_standby().await.expect("a sync standby");
            report.note(
                started,
                format!("SIGKILL of {standby}, the only synchronous standby, for {down:?}"),
            );
            cluster.kill_node(&standby);
            tokio::time::sleep(down).await;
            report.note(started, format!("{standby} started again"));
            let back = OffsetDateTime::now_utc();
            cluster.start_node(&standby);
            cluster
                .wait_until_replicas_stream(&old, cluster.nodes.len() - 1)
                .await;
            report.note(started, format!("{standby} streams again, synchronous"));
            report.first_settled_after =
                first_settled(&cluster.node(&old).url("onecharge"), back, started).await;
            report.local_only_commits = cluster
                .node(&old)
                .log()
                .matches("canceling wait for synchronous replication")
                .count();
        }
    }
    if fault.moves_the_leader() {
        let new = cluster
            .wait_for_new_primary(&old, Duration::from_secs(120))
            .await;
        let promoted = OffsetDateTime::now_utc();
        report.new_primary_after = Some(started.elapsed().as_secs_f64());
        report.note(started, format!("{new} answers /primary"));
        cluster.wait_until_routed_to(&new).await;
        report.routed_after = Some(started.elapsed().as_secs_f64());
        report.note(started, format!("HAProxy routes to {new}"));
        report.first_settled_after =
            first_settled(&cluster.node(&new).url("onecharge"), promoted, started).await;
        report.note(started, "a charge settled on the new leader");
        match fault {
            Fault::LeaderLost | Fault::LeaderLostAheadOfItsReplicas => {
                cluster.start_node(&old);
            }
            Fault::LeaderLostWithEtcdMemberDown => {
                cluster.start_etcd(0);
                cluster.start_node(&old);
            }
            Fault::LeaderCutOffFromEtcd => cluster.cut_from_etcd(false),
            Fault::Switchover | Fault::OnlySyncStandbyLost(_) => {}
        }
        cluster
            .wait_until_replicas_stream(&new, cluster.nodes.len() - 1)
            .await;
        report.note(started, format!("{old} streams from {new} again"));
        report.new_leader = Some(new);
    }
    stop_watching.cancel();
    let (readiness, gauge) = watcher.await.expect("watcher");
    report.readiness = readiness;
    report.failover_gauge = gauge;
    report.most_commits_waiting = waits.await.expect("sync waits");
    let until = report
        .first_settled_after
        .map_or(started.elapsed(), Duration::from_secs_f64);
    report.logged = logged_between(&watch.log_dir, fault_at, fault_at + until);
    (cluster, report)
}

/// The first charge settled after `after` on the node at `url`, in seconds after `started`
/// (by the database's clock, the same host's).
async fn first_settled(url: &str, after: OffsetDateTime, started: Instant) -> Option<f64> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .ok()?;
    let waited_since = OffsetDateTime::now_utc() - started.elapsed();
    while Instant::now() < deadline {
        let first = pool.try_first_success_after(after).await.ok().flatten();
        if let Some(at) = first {
            pool.close().await;
            return Some((at - waited_since).as_seconds_f64());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    pool.close().await;
    None
}

/// Polls `/readyz` and `/metrics` of one serve process every 250 ms until stopped; each
/// change of what they say, in seconds after `started`.
async fn watch_serve(
    admin: String,
    started: Instant,
    stop: CancellationToken,
) -> (Vec<(f64, String)>, Vec<(f64, String)>) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(8))
        .no_proxy()
        .build()
        .expect("http client");
    let mut readiness: Vec<(f64, String)> = Vec::new();
    let mut gauge: Vec<(f64, String)> = Vec::new();
    let changed = |seen: &mut Vec<(f64, String)>, now: String| {
        if seen.last().map(|(_, s)| s) != Some(&now) {
            seen.push((started.elapsed().as_secs_f64(), now));
        }
    };
    loop {
        let ready = match http.get(format!("{admin}/readyz")).send().await {
            Ok(response) => {
                let body = response.text().await.unwrap_or_default();
                body.lines().next().unwrap_or_default().to_owned()
            }
            Err(err) => format!(
                "no answer ({})",
                if err.is_timeout() { "timeout" } else { "down" }
            ),
        };
        changed(&mut readiness, ready);
        let failover = match http.get(format!("{admin}/metrics")).send().await {
            Ok(response) => response
                .text()
                .await
                .unwrap_or_default()
                .lines()
                .find(|l| l.starts_with("onecharge_database_failover "))
                .map_or_else(|| "absent".to_owned(), str::to_owned),
            Err(_) => "no answer".to_owned(),
        };
        changed(&mut gauge, failover);
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
    }
    (readiness, gauge)
}

/// The most sessions seen waiting for a synchronous standby (`wait_event = 'SyncRep'`) on
/// the node at `url`, sampled every 200 ms until stopped or the node is gone.
async fn watch_sync_waits(url: String, stop: CancellationToken) -> i64 {
    let Ok(pool) = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(1))
        .connect(&url)
        .await
    else {
        return 0;
    };
    let mut most = 0;
    loop {
        if let Ok(n) = pool.try_sync_rep_waits().await {
            most = most.max(n);
        }
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
    pool.close().await;
    most
}

/// The warnings and errors of every serve log in `dir` stamped between `from` and `to`,
/// with numbers and ids blanked so that one kind of line counts once: (count, line), most
/// first.
pub fn logged_between(
    dir: &Path,
    from: OffsetDateTime,
    to: OffsetDateTime,
) -> Vec<(usize, String)> {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if !entry.file_name().to_string_lossy().starts_with("serve-") {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for line in text.lines() {
            let Some((stamp, rest)) = line.split_once(' ') else {
                continue;
            };
            let Ok(at) = OffsetDateTime::parse(stamp, &Rfc3339) else {
                continue;
            };
            let rest = rest.trim_start();
            if at < from || at > to || !(rest.starts_with("WARN") || rest.starts_with("ERROR")) {
                continue;
            }
            *counts.entry(blank_numbers(rest)).or_default() += 1;
        }
    }
    let mut out: Vec<(usize, String)> = counts.into_iter().map(|(l, n)| (n, l)).collect();
    out.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    out
}

/// `line` with every run of digits and hex (ids, sequences, ports, durations) as `#`, cut
/// to 220 characters.
fn blank_numbers(line: &str) -> String {
    let mut out = String::new();
    let mut in_number = false;
    for c in line.chars() {
        if c.is_ascii_digit() || (in_number && c.is_ascii_hexdigit()) || (in_number && c == '-') {
            if !in_number {
                out.push('#');
                in_number = true;
            }
        } else {
            in_number = false;
            out.push(c);
        }
    }
    out.chars().take(220).collect()
}

/// After a failover without synchronous replication, once both intake consumers have
/// nothing left: the valid commands (charges and refunds) the new leader has no dedupe row
/// for; then what `onecharge intake audit` names, each finding replayed
/// (`intake audit --replay`), so that the soak can settle and be verified.
pub async fn account_for_loss(
    pool: &sqlx::PgPool,
    jetstream: &async_nats::jetstream::Context,
    names: &onecharge::broker::Names,
    plan: &Plan,
    config: &Path,
) -> Loss {
    use onecharge::broker::CommandKind;
    let deadline = Instant::now() + Duration::from_secs(180);
    let commands = jetstream
        .get_stream(names.commands_stream())
        .await
        .expect("the command stream");
    let intake = onecharge::config::IntakeSettings::default();
    loop {
        let mut drained = true;
        for kind in [CommandKind::Charge, CommandKind::Refund] {
            let mut consumer: async_nats::jetstream::consumer::PullConsumer = commands
                .get_consumer(&kind.consumer_name(&intake))
                .await
                .expect("an intake consumer");
            let info = consumer.info().await.expect("consumer info");
            drained &= info.num_pending == 0 && info.num_ack_pending == 0;
        }
        if drained {
            break;
        }
        assert!(Instant::now() < deadline, "intake did not drain the stream");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let recorded: std::collections::HashSet<String> = pool
        .processed_messages()
        .await
        .into_iter()
        .map(|row| row.message_id)
        .collect();
    let mut lacking: Vec<String> = plan
        .valid_message_ids
        .iter()
        .chain(&plan.refund_message_ids)
        .filter(|id| !recorded.contains(*id))
        .cloned()
        .collect();
    lacking.sort();
    // Past the audit's grace: every acknowledged sequence is judged.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let out = crate::fleet::onecharge(config)
        .args(["intake", "audit", "--json"])
        .output()
        .expect("onecharge intake audit");
    crate::support::assert_exited_ok(&out, "onecharge intake audit");
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("intake audit --json");
    let findings: Vec<(u64, String)> = report["unrecorded"]
        .as_array()
        .expect("unrecorded")
        .iter()
        .map(|m| {
            (
                m["stream_sequence"].as_u64().expect("a sequence"),
                m["message_id"].as_str().unwrap_or("-").to_owned(),
            )
        })
        .collect();
    // A producer's retry past the duplicate window stores one message id at two
    // sequences: replaying the first records the id, and the second finding closes.
    let mut replayed = std::collections::HashSet::new();
    for (sequence, message_id) in &findings {
        if !replayed.insert(message_id.clone()) {
            continue;
        }
        let out = crate::fleet::onecharge(config)
            .args(["intake", "audit", "--replay", &sequence.to_string()])
            .output()
            .expect("onecharge intake audit --replay");
        crate::support::assert_exited_ok(&out, "onecharge intake audit --replay");
    }
    let replayed = replayed.len();
    let mut audit_named: Vec<String> = findings.into_iter().map(|(_, id)| id).collect();
    audit_named.sort();
    audit_named.dedup();
    Loss {
        lacking,
        audit_named,
        replayed,
    }
}

/// The most lines of one kind (numbers and ids blanked) the serve processes may log at
/// warn or error from the fault to the first settled charge: one per failed step would be
/// thousands (one per command delivered meanwhile); the failover is announced once.
const MOST_LINES_OF_ONE_KIND: usize = 100;

/// The failover's own gates, beyond the soak's verifier: the leader moved where the fault
/// moves it, a charge settled on it, serve 0 is ready at the end and said "failover" on
/// `/metrics` meanwhile (`onecharge_database_failover` 1, then 0), no serve process gave
/// up and exited, no wall of warnings, and nothing is in review that a person would not
/// expect (an attempt whose gateway answered `400`, the soak's planned review; never a
/// reason that speaks of the database).
pub fn gates(
    report: &FailoverReport,
    fault: Fault,
    plan: &Plan,
    observed: &Observed,
    refund_reviews: &BTreeMap<String, usize>,
    unexpected_exits: &[String],
) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut problem = |text: String| {
        problems.push(Problem {
            attempt: None,
            text,
        })
    };
    if fault.moves_the_leader() && report.new_leader.is_none() {
        problem(format!("no new leader after {fault:?}"));
    }
    if fault.moves_the_leader() {
        let said = |value: &str| {
            report
                .failover_gauge
                .iter()
                .any(|(_, line)| line == &format!("onecharge_database_failover {value}"))
        };
        if !said("1") {
            problem(format!(
                "serve 0's /metrics never said onecharge_database_failover 1: {:?}",
                report.failover_gauge
            ));
        }
        if report.failover_gauge.last().map(|(_, l)| l.as_str())
            != Some("onecharge_database_failover 0")
        {
            problem(format!(
                "serve 0's onecharge_database_failover is not 0 at the end: {:?}",
                report.failover_gauge
            ));
        }
    }
    for exit in unexpected_exits {
        problem(format!(
            "a serve process gave up during the failover: {exit}"
        ));
    }
    if let Some((count, line)) = report.logged.first() {
        if *count > MOST_LINES_OF_ONE_KIND {
            problem(format!(
                "a wall of {count} log lines during the failover: {line}"
            ));
        }
    }
    if report.first_settled_after.is_none() {
        problem("no charge settled on the leader after the fault".to_owned());
    }
    match report.readiness.last() {
        Some((_, last)) if last == "ready" => {}
        other => problem(format!("/readyz is not ready at the end: {other:?}")),
    }
    for attempt in &observed.attempts {
        if attempt.status != "needs_review" {
            continue;
        }
        let planned = plan
            .attempts
            .get(&attempt.payment_attempt_id)
            .map(|p| p.payment_method);
        if planned != Some(mock_gateway::payment_methods::FAULT_BAD_REQUEST) {
            problem(format!(
                "attempt {} ({planned:?}) needs review unexpectedly: {:?}",
                attempt.payment_attempt_id, attempt.review_reason
            ));
        }
    }
    let database = ["database", "read-only", "PostgreSQL", "25006", "failover"];
    for reason in refund_reviews.keys() {
        if database.iter().any(|word| reason.contains(word)) {
            problem(format!(
                "a refund needs review because of the database: {reason}"
            ));
        }
    }
    problems
}

/// The soak a drill runs in: the short soak's faults at its pace, fewer commands, two
/// serve processes (serve 0 never killed: it is watched), and the drill.
fn drill_soak(seed: u64, commands: usize, drill: Drill) -> SoakConfig {
    SoakConfig {
        seed,
        commands,
        processes: 2,
        spared: 1,
        min_kills: 2,
        max_kills: 4,
        kill_every: (Duration::from_millis(3000), Duration::from_millis(6000)),
        broker_restarts: 0,
        settle_timeout: Duration::from_secs(180),
        database: Some(drill),
        ..short_soak()
    }
}

/// Runs a drill unless its tools are missing (SKIPPED outside CI, a failure in CI).
async fn run_drill(name: &str, seed: u64, commands: usize, drill: Drill) {
    if !tools_or_skip(name, drill.options.first_node_in_netns) {
        return;
    }
    crate::soak(drill_soak(seed, commands, drill)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leaders_node_lost_under_synchronous_mode_loses_no_acknowledged_command_and_charges_nothing_twice(
) {
    run_drill(
        "the Patroni leader-lost drill",
        seed(56),
        crate::commands(600),
        Drill {
            options: PatroniOptions::default(),
            fault: Fault::LeaderLost,
            at: 0.3,
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "Patroni drill: cargo test --test soak patroni:: -- --ignored --nocapture --test-threads=1"]
async fn a_planned_switchover_under_load_loses_nothing_and_charges_nothing_twice() {
    run_drill(
        "the Patroni switchover drill",
        seed(561),
        crate::commands(1_200),
        Drill {
            options: PatroniOptions::default(),
            fault: Fault::Switchover,
            at: 0.3,
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "Patroni drill: cargo test --test soak patroni:: -- --ignored --nocapture --test-threads=1"]
async fn under_strict_synchronous_mode_losing_the_only_sync_standby_stalls_writes_and_loses_nothing(
) {
    run_drill(
        "the Patroni strict-mode drill",
        seed(562),
        crate::commands(1_200),
        Drill {
            options: PatroniOptions {
                nodes: 2,
                synchronous_mode_strict: true,
                ..PatroniOptions::default()
            },
            fault: Fault::OnlySyncStandbyLost(Duration::from_secs(40)),
            at: 0.2,
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "Patroni drill: cargo test --test soak patroni:: -- --ignored --nocapture --test-threads=1"]
async fn the_leader_lost_while_an_etcd_member_is_down_fails_over_and_loses_nothing() {
    run_drill(
        "the Patroni etcd-member drill",
        seed(563),
        crate::commands(1_200),
        Drill {
            options: PatroniOptions {
                etcd_members: 3,
                ..PatroniOptions::default()
            },
            fault: Fault::LeaderLostWithEtcdMemberDown,
            at: 0.3,
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "Patroni drill: cargo test --test soak patroni:: -- --ignored --nocapture --test-threads=1"]
async fn a_leader_cut_off_from_etcd_but_not_from_onecharge_demotes_itself_and_loses_nothing() {
    run_drill(
        "the Patroni partition drill",
        seed(564),
        crate::commands(1_200),
        Drill {
            options: PatroniOptions {
                first_node_in_netns: true,
                ..PatroniOptions::default()
            },
            fault: Fault::LeaderCutOffFromEtcd,
            at: 0.3,
        },
    )
    .await;
}

/// Without synchronous replication the drill is a report, not a pass: the leader commits
/// alone for a few seconds (replication cut), then is lost. What the new leader lacks, the
/// stream audit must name, every command of it; replayed, nothing is charged or refunded
/// twice. Everything else the soak's verifier finds is printed, and is what a team running
/// asynchronous replication signs up for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "Patroni drill: cargo test --test soak patroni:: -- --ignored --nocapture --test-threads=1"]
async fn without_synchronous_replication_the_stream_audit_names_every_acknowledged_command_the_new_leader_lacks(
) {
    let drill = Drill {
        options: PatroniOptions {
            synchronous_mode: false,
            replication_forwarders: true,
            // The replicas fall a few seconds behind; a team on the default (1 MB) might
            // wait for the old leader instead, which is the other choice.
            maximum_lag_on_failover: 256 * 1024 * 1024,
            ..PatroniOptions::default()
        },
        fault: Fault::LeaderLostAheadOfItsReplicas,
        at: 0.3,
    };
    if !tools_or_skip("the asynchronous Patroni drill", false) {
        return;
    }
    let report = crate::runner::run(drill_soak(seed(565), crate::commands(1_200), drill)).await;
    let failover = report.failover.expect("a failover report");
    let loss = failover.loss.expect("the loss accounted for");
    assert!(
        !loss.lacking.is_empty(),
        "the leader committed alone for 3 s and nothing was lost: the drill cut nothing"
    );
    assert_eq!(
        loss.audit_named, loss.lacking,
        "the stream audit must name exactly the acknowledged commands the new leader lacks"
    );
    let twice: Vec<&str> = report
        .problems
        .iter()
        .map(|p| p.text.as_str())
        .filter(|t| {
            t.starts_with("DOUBLE CHARGE")
                || t.starts_with("REFUND SENT TWICE")
                || t.starts_with("OVER-REFUND")
        })
        .collect();
    assert!(twice.is_empty(), "money moved twice: {twice:?}");
}
