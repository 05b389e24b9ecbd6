//! The console's pictures, drawn on the server as SVG (no script; the page's CSP allows
//! none): the overview's time charts and an attempt's timeline. Pure: numbers in, markup
//! out, so every drawing rule is unit-tested here. Colours are CSS classes (`fill-*`,
//! `stroke-*` in `style.css`): the CSP refuses inline styles.
//!
//! Each picture carries `data-*` attributes with what it shows (how many bars, the largest
//! value), for the browser tests and for a person reading the source.
//!
//! Over 600 lines only with its tests: each chart's drawing and its tests together.

use std::time::Duration;

use maud::{html, Markup};
use time::{OffsetDateTime, UtcOffset};

use crate::store::reads::charts::{LatencyPercentiles, OverviewSeries, SettlementCount, Window};

/// The size of a chart's drawing, in SVG user units (it scales with the page).
const WIDTH: f64 = 560.0;
const HEIGHT: f64 = 190.0;
const LEFT: f64 = 52.0;
const RIGHT: f64 = 10.0;
const TOP: f64 = 10.0;
const BOTTOM: f64 = 24.0;

/// One thing a chart shows: its name in the legend and its colour class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Series {
    pub name: String,
    /// The suffix of the `fill-*` / `stroke-*` classes.
    pub colour: String,
}

impl Series {
    fn new(name: &str, colour: &str) -> Self {
        Self {
            name: name.to_owned(),
            colour: colour.to_owned(),
        }
    }
}

/// A chart over time: bars stacked per bucket, or lines through points.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeChart {
    /// The element id (`chart-…`).
    pub id: String,
    pub title: String,
    /// What the y axis counts, said after a value (`/min`, ` s`, …): see [`TimeChart::label`].
    pub unit: Unit,
    pub start: OffsetDateTime,
    pub end: OffsetDateTime,
    pub series: Vec<Series>,
    pub kind: ChartKind,
}

/// How values read on an axis and in a tooltip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// A count per minute.
    PerMinute,
    /// A duration in seconds, shown as ms, s, m or h.
    Seconds,
    /// A plain count.
    Count,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ChartKind {
    /// One stack per bucket: `values[i]` belongs to `series[i]`.
    Bars { step: Duration, bars: Vec<Bar> },
    /// One line per series: `lines[i]` belongs to `series[i]`; a line breaks where two
    /// points are more than `gap` apart (no data there, not a straight run).
    Lines {
        gap: Duration,
        lines: Vec<Vec<(OffsetDateTime, f64)>>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    pub start: OffsetDateTime,
    pub values: Vec<f64>,
}

impl Unit {
    /// The top of the y axis for values up to `max`: a round number in the unit a person
    /// reads it in (minutes for a wait of minutes), never a fraction of a count.
    fn ceiling(self, max: f64) -> f64 {
        match self {
            Self::Seconds if max >= 7200.0 => nice_ceiling(max / 3600.0) * 3600.0,
            Self::Seconds if max >= 120.0 => nice_ceiling(max / 60.0) * 60.0,
            Self::Count => nice_ceiling(max).max(2.0),
            _ => nice_ceiling(max),
        }
    }

    fn label(self, value: f64) -> String {
        match self {
            Self::PerMinute => format!("{}/min", number(value)),
            Self::Count => number(value),
            Self::Seconds => seconds(value),
        }
    }
}

/// A number with at most one decimal, none when whole.
fn number(value: f64) -> String {
    if (value - value.round()).abs() < 1e-9 {
        format!("{}", value.round() as i64)
    } else {
        format!("{value:.1}")
    }
}

/// `850 ms`, `2.5 s`, `4 min`, `3.2 h`.
fn seconds(value: f64) -> String {
    if value == 0.0 {
        "0".to_owned()
    } else if value < 1.0 {
        format!("{} ms", number(value * 1000.0))
    } else if value < 120.0 {
        format!("{} s", number(value))
    } else if value < 7200.0 {
        format!("{} min", number(value / 60.0))
    } else {
        format!("{} h", number(value / 3600.0))
    }
}

/// The smallest "round" number (1, 2, 2.5 or 5 times a power of ten) at or above `value`:
/// the top of the y axis. 1 for an empty chart, so it still has an axis.
pub fn nice_ceiling(value: f64) -> f64 {
    if value.is_nan() || value <= 0.0 {
        return 1.0;
    }
    let power = 10_f64.powf(value.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|top| *top >= value * (1.0 - 1e-12))
        .unwrap_or(10.0 * power)
}

/// `HH:MM` in UTC.
fn clock(t: OffsetDateTime) -> String {
    let t = t.to_offset(UtcOffset::UTC);
    format!("{:02}:{:02}", t.hour(), t.minute())
}

/// The x of `t` on a plot from `start` to `end`, `width` wide from `left`.
fn x_of(
    t: OffsetDateTime,
    start: OffsetDateTime,
    end: OffsetDateTime,
    left: f64,
    width: f64,
) -> f64 {
    let span = (end - start).as_seconds_f64();
    if span <= 0.0 {
        return left + width;
    }
    let at = ((t - start).as_seconds_f64() / span).clamp(0.0, 1.0);
    left + at * width
}

fn y_of(value: f64, top_value: f64) -> f64 {
    let plot = HEIGHT - TOP - BOTTOM;
    TOP + plot * (1.0 - (value / top_value).clamp(0.0, 1.0))
}

/// Two decimals are plenty for a screen, and keep the markup short.
fn px(value: f64) -> String {
    format!("{value:.2}")
}

impl TimeChart {
    /// The largest value any bucket stacks or any point reaches.
    pub fn max_value(&self) -> f64 {
        match &self.kind {
            ChartKind::Bars { bars, .. } => bars
                .iter()
                .map(|b| b.values.iter().sum::<f64>())
                .fold(0.0, f64::max),
            ChartKind::Lines { lines, .. } => {
                lines.iter().flatten().map(|(_, v)| *v).fold(0.0, f64::max)
            }
        }
    }

    fn is_empty(&self) -> bool {
        match &self.kind {
            ChartKind::Bars { bars, .. } => bars.iter().all(|b| b.values.iter().all(|v| *v <= 0.0)),
            ChartKind::Lines { lines, .. } => lines.iter().all(Vec::is_empty),
        }
    }

    /// The chart as a `figure`: title, the SVG, and its legend.
    pub fn render(&self) -> Markup {
        let top_value = self.unit.ceiling(self.max_value());
        let plot_width = WIDTH - LEFT - RIGHT;
        let plot_bottom = HEIGHT - BOTTOM;
        let x = |t| x_of(t, self.start, self.end, LEFT, plot_width);
        let span = self.end - self.start;
        let ticks: Vec<OffsetDateTime> = (0..=4).map(|i| self.start + span * i / 4).collect();
        let (kind, points) = match &self.kind {
            ChartKind::Bars { bars, .. } => ("bars", bars.len()),
            ChartKind::Lines { lines, .. } => ("lines", lines.iter().map(Vec::len).sum()),
        };
        html! {
            figure .chart id=(self.id) data-kind=(kind) data-points=(points) data-max=(self.max_value()) {
                figcaption { (self.title) }
                svg xmlns="http://www.w3.org/2000/svg" viewBox=(format!("0 0 {WIDTH} {HEIGHT}")) role="img" aria-label=(self.title) {
                    // the y axis: 0, half, top, with grid lines
                    @for fraction in [0.0, 0.5, 1.0] {
                        @let y = y_of(top_value * fraction, top_value);
                        line .grid x1=(px(LEFT)) x2=(px(WIDTH - RIGHT)) y1=(px(y)) y2=(px(y)) {}
                        text .axis x=(px(LEFT - 6.0)) y=(px(y + 4.0)) text-anchor="end" { (self.unit.label(top_value * fraction)) }
                    }
                    @for (i, tick) in ticks.iter().enumerate() {
                        @let anchor = match i { 0 => "start", 4 => "end", _ => "middle" };
                        text .axis x=(px(x(*tick))) y=(px(HEIGHT - 6.0)) text-anchor=(anchor) { (clock(*tick)) }
                    }
                    @match &self.kind {
                        ChartKind::Bars { step, bars } => {
                            @for bar in bars {
                                @let left = x(bar.start);
                                @let right = x(bar.start + *step);
                                @let width = (right - left - 1.0).max(1.0);
                                g .bar data-start=(clock(bar.start)) {
                                    title { (clock(bar.start)) ": " (self.bar_summary(bar)) }
                                    @for (series, value, y_top, y_bottom) in self.stack(bar, top_value) {
                                        rect class=(format!("fill-{}", series.colour)) data-series=(series.name) data-value=(value)
                                            x=(px(left)) y=(px(y_top)) width=(px(width)) height=(px(y_bottom - y_top)) {}
                                    }
                                }
                            }
                        }
                        ChartKind::Lines { gap, lines } => {
                            @for (line, series) in lines.iter().zip(&self.series) {
                                @for run in runs(line, *gap) {
                                    @if run.len() > 1 {
                                        polyline class=(format!("line stroke-{}", series.colour)) data-series=(series.name)
                                            points=(run.iter().map(|(t, v)| format!("{},{}", px(x(*t)), px(y_of(*v, top_value)))).collect::<Vec<_>>().join(" ")) {}
                                    }
                                    @for (t, v) in run {
                                        circle class=(format!("fill-{}", series.colour)) data-series=(series.name) data-value=(v)
                                            cx=(px(x(*t))) cy=(px(y_of(*v, top_value))) r="2.2" {
                                            title { (clock(*t)) " " (series.name) ": " (self.unit.label(*v)) }
                                        }
                                    }
                                }
                            }
                        }
                    }
                    line .axis-line x1=(px(LEFT)) x2=(px(WIDTH - RIGHT)) y1=(px(plot_bottom)) y2=(px(plot_bottom)) {}
                    @if self.is_empty() {
                        text .empty x=(px(LEFT + plot_width / 2.0)) y=(px(TOP + (plot_bottom - TOP) / 2.0)) text-anchor="middle" { "nothing in this window" }
                    }
                }
                ul .legend {
                    @for series in &self.series {
                        li { span class=(format!("swatch fill-{}", series.colour)) {} (series.name) }
                    }
                }
            }
        }
    }

    /// The parts of `bar` that are not zero, bottom up: each with its series, value and the
    /// y of its top and bottom.
    fn stack<'a>(&'a self, bar: &Bar, top_value: f64) -> Vec<(&'a Series, f64, f64, f64)> {
        let mut base = 0.0;
        let mut parts = Vec::new();
        for (value, series) in bar.values.iter().zip(&self.series) {
            if *value > 0.0 {
                parts.push((
                    series,
                    *value,
                    y_of(base + value, top_value),
                    y_of(base, top_value),
                ));
                base += value;
            }
        }
        parts
    }

    fn bar_summary(&self, bar: &Bar) -> String {
        let parts: Vec<String> = bar
            .values
            .iter()
            .zip(&self.series)
            .filter(|(v, _)| **v > 0.0)
            .map(|(v, s)| format!("{} {}", self.unit.label(*v), s.name))
            .collect();
        if parts.is_empty() {
            "none".to_owned()
        } else {
            parts.join(", ")
        }
    }
}

/// `line` cut where two neighbours are more than `gap` apart.
fn runs(line: &[(OffsetDateTime, f64)], gap: Duration) -> Vec<&[(OffsetDateTime, f64)]> {
    let mut runs = Vec::new();
    let mut begin = 0;
    for i in 1..line.len() {
        if (line[i].0 - line[i - 1].0).as_seconds_f64() > gap.as_secs_f64() {
            runs.push(&line[begin..i]);
            begin = i;
        }
    }
    if begin < line.len() {
        runs.push(&line[begin..]);
    }
    runs
}

/// The states a settlement reaches, in the order they stack, with their colours.
const SETTLED: [(&str, &str); 4] = [
    ("succeeded", "good"),
    ("declined", "muted"),
    ("expired", "quiet"),
    ("needs_review", "bad"),
];

/// The overview's four charts over `window`, ending at `series.now`.
pub fn overview_charts(series: &OverviewSeries, window: Window) -> Vec<TimeChart> {
    let end = series.now;
    let start = end - window.span;
    vec![
        settlements_chart(&series.settlements, window, start, end),
        latency_chart(&series.latency, window, start, end),
        TimeChart {
            id: "chart-review-size".into(),
            title: "Review queue: attempts waiting for a person".into(),
            unit: Unit::Count,
            start,
            end,
            series: vec![Series::new("in needs_review", "bad")],
            kind: ChartKind::Lines {
                gap: window.step * 2,
                lines: vec![series
                    .review_queue
                    .iter()
                    .map(|s| (s.at, s.size as f64))
                    .collect()],
            },
        },
        TimeChart {
            id: "chart-review-oldest".into(),
            title: "Review queue: longest wait".into(),
            unit: Unit::Seconds,
            start,
            end,
            series: vec![Series::new("oldest in review", "warn")],
            kind: ChartKind::Lines {
                gap: window.step * 2,
                lines: vec![series
                    .review_queue
                    .iter()
                    .map(|s| (s.at, s.oldest_seconds))
                    .collect()],
            },
        },
    ]
}

/// Settlements per minute by the state reached: one stacked bar per bucket of the window,
/// empty buckets included, so the bars keep their places.
fn settlements_chart(
    counts: &[SettlementCount],
    window: Window,
    start: OffsetDateTime,
    end: OffsetDateTime,
) -> TimeChart {
    let step = window.step.as_secs_f64().max(1.0);
    let minutes = step / 60.0;
    let first = bucket_start(start, window.step);
    let mut bars = Vec::new();
    let mut at = first;
    while at <= end {
        let values = SETTLED
            .iter()
            .map(|(status, _)| {
                counts
                    .iter()
                    .filter(|c| c.bucket == at && c.status == *status)
                    .map(|c| c.count as f64 / minutes)
                    .sum()
            })
            .collect();
        bars.push(Bar { start: at, values });
        at += window.step;
    }
    TimeChart {
        id: "chart-settlements".into(),
        title: "Settlements per minute, by outcome".into(),
        unit: Unit::PerMinute,
        start: first,
        end: first + window.step * bars.len() as u32,
        series: SETTLED.iter().map(|(s, c)| Series::new(s, c)).collect(),
        kind: ChartKind::Bars {
            step: window.step,
            bars,
        },
    }
}

fn latency_chart(
    latency: &[LatencyPercentiles],
    window: Window,
    start: OffsetDateTime,
    end: OffsetDateTime,
) -> TimeChart {
    // each bucket's figure drawn at its middle
    let middle = window.step / 2;
    TimeChart {
        id: "chart-latency".into(),
        title: "Gateway charge latency, p50 and p99".into(),
        unit: Unit::Seconds,
        start,
        end,
        series: vec![Series::new("p50", "accent"), Series::new("p99", "warn")],
        kind: ChartKind::Lines {
            gap: window.step * 2,
            lines: vec![
                latency
                    .iter()
                    .map(|l| (l.bucket + middle, l.p50_seconds))
                    .collect(),
                latency
                    .iter()
                    .map(|l| (l.bucket + middle, l.p99_seconds))
                    .collect(),
            ],
        },
    }
}

/// The start of the bucket `t` falls in: buckets are `step` wide from the epoch, as the
/// store's `date_bin` makes them.
fn bucket_start(t: OffsetDateTime, step: Duration) -> OffsetDateTime {
    let step_ns = step.as_nanos().max(1) as i128;
    let ns = t.unix_timestamp_nanos();
    OffsetDateTime::from_unix_timestamp_nanos(ns - ns.rem_euclid(step_ns)).unwrap_or(t)
}

// ---------------------------------------------------------------------------------------
// An attempt's timeline

/// What an attempt's timeline picture shows: its states over time, its gateway calls and
/// its events, each at its own time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimelinePicture {
    /// Each state the attempt entered, and when, in order.
    pub states: Vec<(OffsetDateTime, String)>,
    pub calls: Vec<CallMark>,
    /// Each event, when it was written, and its state.
    pub events: Vec<(OffsetDateTime, String)>,
    /// Where the picture ends: now, for an attempt still moving; its last entry otherwise.
    pub end: OffsetDateTime,
}

/// One gateway call on the timeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallMark {
    pub started_at: OffsetDateTime,
    pub duration_ms: i64,
    /// `charge`, `lookup` or `prepare`.
    pub operation: String,
    /// The classified outcome: `succeeded`, `declined`, `ambiguous`, …
    pub outcome: String,
}

impl CallMark {
    /// Whether the call settled something (an answer the gateway stands by) or not.
    fn colour(&self) -> &'static str {
        match self.outcome.as_str() {
            "succeeded" | "found" => "good",
            "declined" | "not_found" => "muted",
            _ => "warn",
        }
    }
}

const LANES: [&str; 3] = ["state", "gateway", "events"];
/// Wider than a chart: the picture spans the page, and its text keeps the charts' size.
const TIMELINE_WIDTH: f64 = 1100.0;
const TIMELINE_HEIGHT: f64 = 118.0;
const LANE_LEFT: f64 = 64.0;
const LANE_HEIGHT: f64 = 26.0;

fn state_colour(status: &str) -> &'static str {
    match status {
        "succeeded" => "good",
        "declined" | "expired" => "muted",
        "needs_review" => "bad",
        "unknown" | "in_flight" => "warn",
        "pending" => "quiet",
        _ => "accent",
    }
}

/// `+0`, `+850 ms`, `+2.5 s`, `+4 min`: how long after the first entry.
fn offset_label(seconds_after: f64) -> String {
    if seconds_after <= 0.0 {
        "+0".to_owned()
    } else {
        format!("+{}", seconds(seconds_after))
    }
}

impl TimelinePicture {
    fn start(&self) -> OffsetDateTime {
        let firsts = [
            self.states.first().map(|(t, _)| *t),
            self.calls.iter().map(|c| c.started_at).min(),
            self.events.first().map(|(t, _)| *t),
        ];
        firsts.into_iter().flatten().min().unwrap_or(self.end)
    }

    /// The picture: three lanes on one time axis, labelled in time since the first entry.
    pub fn render(&self) -> Markup {
        let start = self.start();
        let end = self.end.max(start + time::Duration::milliseconds(1));
        let width = TIMELINE_WIDTH - LANE_LEFT - RIGHT;
        let x = |t| x_of(t, start, end, LANE_LEFT, width);
        let lane_y = |i: usize| TOP + i as f64 * (LANE_HEIGHT + 6.0);
        let span = (end - start).as_seconds_f64();
        html! {
            figure .chart .timeline-picture #timeline-picture data-states=(self.states.len()) data-calls=(self.calls.len()) data-events=(self.events.len()) {
                figcaption { "Timeline (since the attempt was recorded)" }
                svg xmlns="http://www.w3.org/2000/svg" viewBox=(format!("0 0 {TIMELINE_WIDTH} {TIMELINE_HEIGHT}")) role="img" aria-label="The attempt's timeline" {
                    @for (i, lane) in LANES.iter().enumerate() {
                        text .axis x=(px(LANE_LEFT - 8.0)) y=(px(lane_y(i) + LANE_HEIGHT / 2.0 + 4.0)) text-anchor="end" { (lane) }
                        line .grid x1=(px(LANE_LEFT)) x2=(px(TIMELINE_WIDTH - RIGHT)) y1=(px(lane_y(i) + LANE_HEIGHT)) y2=(px(lane_y(i) + LANE_HEIGHT)) {}
                    }
                    @for (i, (entered, status)) in self.states.iter().enumerate() {
                        @let until = self.states.get(i + 1).map_or(end, |(t, _)| *t);
                        @let left = x(*entered);
                        @let w = (x(until) - left).max(2.0);
                        g .state-span data-status=(status) {
                            title { (status) " from " (offset_label((*entered - start).as_seconds_f64())) }
                            rect class=(format!("fill-{}", state_colour(status))) x=(px(left)) y=(px(lane_y(0))) width=(px(w)) height=(px(LANE_HEIGHT)) {}
                            @if w >= 90.0 {
                                text class=(format!("on-fill on-{}", state_colour(status))) x=(px(left + 4.0)) y=(px(lane_y(0) + LANE_HEIGHT / 2.0 + 4.0)) { (status) }
                            }
                        }
                    }
                    @for call in &self.calls {
                        @let left = x(call.started_at);
                        @let w = (x(call.started_at + time::Duration::milliseconds(call.duration_ms)) - left).max(3.0);
                        rect class=(format!("call fill-{}", call.colour())) data-outcome=(call.outcome)
                            x=(px(left)) y=(px(lane_y(1) + 4.0)) width=(px(w)) height=(px(LANE_HEIGHT - 8.0)) {
                            title { (call.operation) " " (call.outcome) " at " (offset_label((call.started_at - start).as_seconds_f64())) ", " (call.duration_ms) " ms" }
                        }
                    }
                    @for (at, status) in &self.events {
                        @let cx = x(*at);
                        @let cy = lane_y(2) + LANE_HEIGHT / 2.0;
                        polygon class=(format!("event fill-{}", state_colour(status))) data-status=(status)
                            points=(format!("{},{} {},{} {},{} {},{}", px(cx), px(cy - 7.0), px(cx + 7.0), px(cy), px(cx), px(cy + 7.0), px(cx - 7.0), px(cy))) {
                            title { "event " (status) " at " (offset_label((*at - start).as_seconds_f64())) }
                        }
                    }
                    @for i in 0..=4 {
                        @let anchor = match i { 0 => "start", 4 => "end", _ => "middle" };
                        text .axis x=(px(LANE_LEFT + width * f64::from(i) / 4.0)) y=(px(TIMELINE_HEIGHT - 4.0)) text-anchor=(anchor) { (offset_label(span * f64::from(i) / 4.0)) }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;
    use crate::store::reads::charts::ReviewQueueSample;

    const NOW: OffsetDateTime = datetime!(2026-12-01 12:00:30 UTC);

    fn hour() -> Window {
        Window {
            span: Duration::from_secs(3600),
            step: Duration::from_secs(60),
        }
    }

    fn count(bucket: OffsetDateTime, status: &str, count: i64) -> SettlementCount {
        SettlementCount {
            bucket,
            status: status.into(),
            count,
        }
    }

    #[test]
    fn the_axis_tops_at_the_next_round_number() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(f64::NAN), 1.0);
        assert_eq!(nice_ceiling(1.0), 1.0);
        assert_eq!(nice_ceiling(7.0), 10.0);
        assert_eq!(nice_ceiling(12.0), 20.0);
        assert_eq!(nice_ceiling(21.0), 25.0);
        assert_eq!(nice_ceiling(26.0), 50.0);
        assert_eq!(nice_ceiling(0.0042), 0.005);
    }

    #[test]
    fn the_axis_is_round_in_the_unit_it_is_read_in() {
        assert_eq!(Unit::Seconds.ceiling(480.0), 600.0, "10 min, not 8.3");
        assert_eq!(Unit::Seconds.ceiling(3.0 * 3600.0), 5.0 * 3600.0);
        assert_eq!(Unit::Seconds.ceiling(0.4), 0.5);
        assert_eq!(
            Unit::Count.ceiling(1.0),
            2.0,
            "a count's half-way tick is whole"
        );
        assert_eq!(Unit::PerMinute.ceiling(4.0), 5.0);
    }

    #[test]
    fn values_read_in_their_unit() {
        assert_eq!(Unit::PerMinute.label(3.0), "3/min");
        assert_eq!(Unit::PerMinute.label(0.25), "0.2/min");
        assert_eq!(Unit::Seconds.label(0.0123), "12.3 ms");
        assert_eq!(Unit::Seconds.label(2.5), "2.5 s");
        assert_eq!(Unit::Seconds.label(600.0), "10 min");
        assert_eq!(Unit::Seconds.label(10_800.0), "3 h");
        assert_eq!(Unit::Count.label(4.0), "4");
    }

    #[test]
    fn settlements_fill_every_bucket_of_the_window_and_stack_by_outcome_in_proportion() {
        let b = datetime!(2026-12-01 11:58:00 UTC);
        let series = OverviewSeries {
            now: NOW,
            settlements: vec![
                count(b, "succeeded", 3),
                count(b, "declined", 1),
                count(datetime!(2026-12-01 12:00:00 UTC), "needs_review", 2),
            ],
            latency: vec![],
            review_queue: vec![],
        };
        let chart = &overview_charts(&series, hour())[0];
        let ChartKind::Bars { bars, .. } = &chart.kind else {
            panic!("bars")
        };
        // 11:00 .. 12:00, the bucket of now included
        assert_eq!(bars.len(), 61);
        assert_eq!(bars[0].start, datetime!(2026-12-01 11:00:00 UTC));
        let at_b = bars.iter().find(|bar| bar.start == b).unwrap();
        assert_eq!(at_b.values, vec![3.0, 1.0, 0.0, 0.0]);
        assert_eq!(bars.last().unwrap().values, vec![0.0, 0.0, 0.0, 2.0]);
        assert_eq!(chart.max_value(), 4.0);

        let svg = chart.render().into_string();
        assert!(svg.contains(r#"data-points="61""#), "{svg}");
        // the succeeded part of the stack is three times the declined one
        let height = |series: &str| -> f64 {
            let at = svg
                .find(&format!(r#"data-series="{series}" data-value"#))
                .unwrap();
            let rest = &svg[at..];
            let h = rest.find("height=\"").unwrap() + 8;
            rest[h..h + rest[h..].find('"').unwrap()].parse().unwrap()
        };
        assert!((height("succeeded") / height("declined") - 3.0).abs() < 0.01);
        assert!(
            svg.contains("<title>11:58: 3/min succeeded, 1/min declined</title>"),
            "{svg}"
        );
        assert!(!svg.contains("nothing in this window"));
    }

    #[test]
    fn a_wider_window_counts_per_minute_not_per_bucket() {
        let window = Window {
            span: Duration::from_secs(6 * 3600),
            step: Duration::from_secs(300),
        };
        let series = OverviewSeries {
            now: NOW,
            settlements: vec![count(datetime!(2026-12-01 11:55:00 UTC), "succeeded", 10)],
            latency: vec![],
            review_queue: vec![],
        };
        let chart = &overview_charts(&series, window)[0];
        assert_eq!(chart.max_value(), 2.0, "10 in 5 minutes is 2 per minute");
    }

    #[test]
    fn an_empty_window_says_so_and_still_has_its_axes() {
        let series = OverviewSeries {
            now: NOW,
            settlements: vec![],
            latency: vec![],
            review_queue: vec![],
        };
        for chart in overview_charts(&series, hour()) {
            let svg = chart.render().into_string();
            assert!(svg.contains("nothing in this window"), "{}", chart.id);
            assert!(svg.contains(">11:00<"), "{svg}");
        }
    }

    #[test]
    fn latency_lines_break_where_no_calls_were_made() {
        let at = |m: u8| datetime!(2026-12-01 11:00:00 UTC) + time::Duration::minutes(m.into());
        let latency = [10, 11, 12, 40, 41]
            .into_iter()
            .map(|m| LatencyPercentiles {
                bucket: at(m),
                p50_seconds: 0.05,
                p99_seconds: 0.4,
                calls: 10,
            })
            .collect();
        let series = OverviewSeries {
            now: NOW,
            settlements: vec![],
            latency,
            review_queue: vec![],
        };
        let chart = &overview_charts(&series, hour())[1];
        let svg = chart.render().into_string();
        // two runs per percentile: 10-12 and 40-41
        assert_eq!(
            svg.matches(r#"<polyline class="line stroke-accent""#)
                .count(),
            2
        );
        assert_eq!(
            svg.matches(r#"<polyline class="line stroke-warn""#).count(),
            2
        );
        assert!(svg.contains("p99: 400 ms"), "{svg}");
    }

    #[test]
    fn the_review_queue_charts_show_its_size_and_longest_wait() {
        let series = OverviewSeries {
            now: NOW,
            settlements: vec![],
            latency: vec![],
            review_queue: vec![
                ReviewQueueSample {
                    at: NOW - Duration::from_secs(60),
                    size: 1,
                    oldest_seconds: 30.0,
                },
                ReviewQueueSample {
                    at: NOW,
                    size: 3,
                    oldest_seconds: 90.0,
                },
            ],
        };
        let charts = overview_charts(&series, hour());
        assert_eq!(charts[2].max_value(), 3.0);
        assert_eq!(charts[3].max_value(), 90.0);
        assert!(charts[3]
            .render()
            .into_string()
            .contains("oldest in review: 90 s"));
    }

    #[test]
    fn the_timeline_draws_each_state_call_and_event_in_time_order() {
        let t0 = datetime!(2026-12-01 12:00:00 UTC);
        let ms = |n: i64| t0 + time::Duration::milliseconds(n);
        let picture = TimelinePicture {
            states: vec![
                (t0, "pending".into()),
                (ms(100), "in_flight".into()),
                (ms(2_100), "unknown".into()),
                (ms(4_000), "succeeded".into()),
            ],
            calls: vec![
                CallMark {
                    started_at: ms(100),
                    duration_ms: 2_000,
                    operation: "charge".into(),
                    outcome: "ambiguous".into(),
                },
                CallMark {
                    started_at: ms(3_900),
                    duration_ms: 50,
                    operation: "lookup".into(),
                    outcome: "found".into(),
                },
            ],
            events: vec![(ms(4_000), "succeeded".into())],
            end: ms(4_000),
        };
        let svg = picture.render().into_string();
        assert!(svg.contains(r#"data-states="4" data-calls="2" data-events="1""#));
        let x_of_state = |status: &str| -> f64 {
            let at = svg.find(&format!(r#"data-status="{status}""#)).unwrap();
            let rest = &svg[at..];
            let x = rest.find(" x=\"").unwrap() + 4;
            rest[x..x + rest[x..].find('"').unwrap()].parse().unwrap()
        };
        assert!(x_of_state("pending") < x_of_state("in_flight"));
        assert!(x_of_state("in_flight") < x_of_state("unknown"));
        assert!(x_of_state("unknown") < x_of_state("succeeded"));
        // the ambiguous charge spans half the picture: as wide as the in_flight state
        assert!(
            svg.contains("charge ambiguous at +100 ms, 2000 ms"),
            "{svg}"
        );
        assert!(
            svg.contains(">+4 s<"),
            "the axis ends 4 s after the start: {svg}"
        );
    }

    #[test]
    fn a_name_in_a_chart_is_escaped() {
        let chart = TimeChart {
            id: "chart-x".into(),
            title: "<script>".into(),
            unit: Unit::Count,
            start: NOW - Duration::from_secs(60),
            end: NOW,
            series: vec![Series::new("a<b", "good")],
            kind: ChartKind::Lines {
                gap: Duration::from_secs(60),
                lines: vec![vec![(NOW, 1.0)]],
            },
        };
        let svg = chart.render().into_string();
        assert!(!svg.contains("<script>") && svg.contains("&lt;script&gt;"));
        assert!(svg.contains("a&lt;b"));
    }
}
