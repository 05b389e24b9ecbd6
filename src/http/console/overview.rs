//! The overview (`/console/`): the charts of the last hour(s), attempts per state, what is
//! waiting, and the health of intake and the gateway, with links to the sweeps and the
//! webhook events. It loads itself again every [`OVERVIEW_REFRESH_SECONDS`] (a meta
//! refresh: the console's CSP allows no script), so a screen left open stays current.

use axum::extract::{Query, State};
use axum::response::Response;
use axum::Extension;
use maud::{html, Markup};
use serde::Deserialize;
use time::OffsetDateTime;

use super::charts;
use super::layout::{refreshing_page, unreadable};
use super::session::Session;
use crate::broker::ConsumerLag;
use crate::domain::AttemptStatus;
use crate::format;
use crate::gateway::HealthSnapshot;
use crate::http::AdminState;
use crate::operator::stats;
use crate::operator::stats::Stats;
use crate::store::reads::charts::{OverviewSeries, Window};

/// How often an open overview loads itself again.
pub(super) const OVERVIEW_REFRESH_SECONDS: u32 = 30;

/// The span the overview's charts cover (`?window=`): 1 hour by the minute (the default),
/// 6 hours by 5 minutes, 24 hours by 20 minutes.
const CHART_WINDOWS: [(&str, Window); 3] = [
    (
        "1h",
        Window {
            span: std::time::Duration::from_secs(3600),
            step: std::time::Duration::from_secs(60),
        },
    ),
    (
        "6h",
        Window {
            span: std::time::Duration::from_secs(6 * 3600),
            step: std::time::Duration::from_secs(300),
        },
    ),
    (
        "24h",
        Window {
            span: std::time::Duration::from_secs(24 * 3600),
            step: std::time::Duration::from_secs(1200),
        },
    ),
];

#[derive(Debug, Default, Deserialize)]
pub(super) struct OverviewQuery {
    window: Option<String>,
}

pub(super) async fn overview(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
    query: Result<Query<OverviewQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let now = OffsetDateTime::now_utc();
    let asked = query.ok().and_then(|Query(q)| q.window);
    let (window_name, window) = CHART_WINDOWS
        .iter()
        .find(|(name, _)| Some(*name) == asked.as_deref())
        .copied()
        .unwrap_or(CHART_WINDOWS[0]);
    let figures = stats::stats(&state.store, &state.broker, now).await;
    let series = crate::store::reads::charts::overview_series(&state.store, window).await;
    let lag = match &state.console.intake_consumer {
        Some(consumer) => Some(state.broker.intake_consumer_lag(consumer).await),
        None => None,
    };
    let health = state
        .gateway_health
        .as_ref()
        .map(|h| (h.snapshot(), h.pause_problem()));
    let body = html! {
        (charts_section(window_name, window, &series))
        (figures_section(&figures))
        (health_section(lag.as_ref(), health.as_ref()))
    };
    refreshing_page("Overview", &session, body, OVERVIEW_REFRESH_SECONDS)
}

/// The charts of the chosen window, and the choice of window.
fn charts_section(
    window_name: &str,
    window: Window,
    series: &Result<OverviewSeries, sqlx::Error>,
) -> Markup {
    html! {
        section #charts data-window=(window_name) {
            h2 { "The last " (match window_name { "1h" => "hour", "6h" => "6 hours", _ => "24 hours" }) }
            p .window-choice {
                "Show: "
                @for (name, _) in CHART_WINDOWS {
                    @if name == window_name { strong { (name) } } @else { a href=(format!("/console/?window={name}")) { (name) } }
                    " "
                }
            }
            @match series {
                Ok(series) => div .charts {
                    @for chart in charts::overview_charts(series, window) { (chart.render()) }
                }
                Err(err) => p #charts-error { (unreadable("The charts", err)) }
            }
        }
    }
}

/// Attempts per state, and what is waiting.
fn figures_section(figures: &anyhow::Result<Stats>) -> Markup {
    html! {
        @match figures {
            Ok(s) => {
                section #attempts-by-state {
                    h2 { "Attempts per state" }
                    table #stats-by-status {
                        thead { tr { th { "state" } th { "attempts" } } }
                        tbody {
                            @for status in AttemptStatus::ALL {
                                @let count = s.by_status.get(status.as_str()).copied().unwrap_or(0);
                                tr data-testid=(format!("stat-{}", status.as_str())) {
                                    td { a href=(format!("/console/attempts?status={}", status.as_str())) { span class=(format!("status status-{}", status.as_str())) { (status.as_str()) } } }
                                    td .count { (count) }
                                }
                            }
                        }
                    }
                }
                section #waiting {
                    h2 { "Waiting" }
                    dl {
                        dt { "Oldest unsettled attempt" }
                        dd #oldest-unsettled data-seconds=(s.oldest_unsettled_seconds) {
                            @if s.oldest_unsettled_seconds == 0 { "none" } @else { (format::short(time::Duration::seconds(s.oldest_unsettled_seconds))) }
                        }
                        dt { "Needs review" }
                        dd #needs-review-count { a href="/console/review" { (s.by_status.get("needs_review").copied().unwrap_or(0)) } }
                        dt { "Dead letters" }
                        dd #dead-letters-count { a href="/console/dead-letters" { (s.dead_letters) } }
                        dt { "Reconciliation" }
                        dd { a #overview-sweeps href="/console/sweeps" { "Sweeps" } " · " a #overview-webhooks href="/console/webhooks" { "Webhook events" } }
                        dt { "Outbox backlog (events not yet published)" }
                        dd #outbox-backlog { (s.outbox_backlog) }
                    }
                }
                (outcomes_section(s))
            }
            Err(err) => p #stats-error { (unreadable("The figures", &format!("{err:#}"))) }
        }
    }
}

/// How the attempts of the last hour and the last 24 hours ended: the success rate and the
/// top decline codes, with the definition on the page (decision 149).
fn outcomes_section(s: &Stats) -> Markup {
    let windows = [
        ("1h", "last hour", &s.outcomes_last_hour),
        ("24h", "last 24 hours", &s.outcomes_last_24h),
    ];
    html! {
        section #outcomes {
            h2 { "Outcomes" }
            p .definition {
                "Success rate = succeeded ÷ (succeeded + declined + expired), over the attempts whose move into one of those final states falls in the window, by the database's clock. "
                "needs_review is not an outcome: an attempt resolved from review counts when it is resolved."
            }
            table #success-rate {
                thead { tr { th { "window" } th { "success rate" } th { "succeeded" } th { "declined" } th { "expired" } } }
                tbody {
                    @for (id, name, o) in windows {
                        tr data-testid=(format!("outcomes-{id}")) {
                            td { (name) }
                            td .rate data-rate=(o.success_rate.map(|r| r.to_string()).unwrap_or_default()) { (o.success_rate_text()) }
                            td .count { (o.succeeded) }
                            td .count { (o.declined) }
                            td .count { (o.expired) }
                        }
                    }
                }
            }
            @for (id, name, o) in windows {
                h3 { "Top decline codes, " (name) }
                @if o.top_decline_codes.is_empty() {
                    p id=(format!("top-declines-{id}")) { "No declines." }
                } @else {
                    table id=(format!("top-declines-{id}")) {
                        thead { tr { th { "decline code" } th { "declines" } } }
                        tbody {
                            @for c in &o.top_decline_codes {
                                tr { td { code { (c.code_text()) } } td .count { (c.count) } }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// How far intake lags, and whether the gateway's calls flow.
fn health_section(
    lag: Option<&anyhow::Result<ConsumerLag>>,
    health: Option<&(HealthSnapshot, Option<&'static str>)>,
) -> Markup {
    html! {
        section #health {
            h2 { "Intake and gateway" }
            dl {
                dt { "Intake lag" }
                dd #intake-lag {
                    @match lag {
                        Some(Ok(lag)) => { (lag.pending) " not yet delivered, " (lag.ack_pending) " being processed" }
                        Some(Err(err)) => (unreadable("The lag", &format!("{err:#}")))
                        None => "not known here"
                    }
                }
                dt { "Gateway" }
                dd #gateway-health {
                    @match health {
                        Some((snapshot, problem)) => {
                            span #gateway-paused data-paused=(problem.is_some()) {
                                @match problem { Some(p) => { "PAUSED: " (p) } None => "calls flowing" }
                            }
                            " · breaker "
                            span #breaker-state { (snapshot.breaker.as_str()) }
                            " (" (snapshot.consecutive_failures) " consecutive failures)"
                            @for work in &snapshot.forbidden {
                                " · " span .gateway-forbidden { "STOPPED: " (work.what()) }
                            }
                        }
                        None => "this process runs no executor: see the executor's /readyz and /metrics"
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::{BreakerState, Work};

    #[test]
    fn the_gateway_line_names_each_kind_of_work_a_missing_permission_stopped() {
        let snapshot = HealthSnapshot {
            credentials_rejected: None,
            endpoint_fault: None,
            lookup_fault: None,
            forbidden: vec![Work::Refunds],
            breaker: BreakerState::Closed,
            consecutive_failures: 0,
        };
        let html = health_section(None, Some(&(snapshot, None))).into_string();
        assert!(html.contains("calls flowing"), "{html}");
        assert!(
            html.contains("STOPPED: gateway key lacks the permission to refund"),
            "{html}"
        );
    }
}
