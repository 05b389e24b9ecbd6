//! Dead letters (`/console/dead-letters`): the list a page at a time and by filter, one
//! letter with its body, its replay (unchanged or corrected) or its discard after a
//! confirmation, and the replay of every letter a filter matches after a preview.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::{Extension, Form};
use maud::html;
use serde::Deserialize;
use time::OffsetDateTime;

use super::fields::set;
use super::layout::{bad_request, csrf_field, failed, failed_saying, page, refused};
use super::session::Session;
use crate::format;
use crate::http::AdminState;
use crate::operator::{dlq, Via};

/// How many letters one page of the list shows.
const PAGE: usize = 100;

/// The list's query: the filter, whether to show discarded letters, and the page.
#[derive(Debug, Default, Deserialize)]
pub(super) struct ListQuery {
    #[serde(default)]
    class: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    discarded: Option<String>,
    #[serde(default)]
    after: Option<u64>,
}

impl ListQuery {
    /// The filter the query names; an unknown class or kind is `Err` with the line to show.
    fn filter(&self) -> Result<dlq::DeadLetterFilter, String> {
        let class = match set(self.class.as_deref().unwrap_or_default()).as_deref() {
            None => None,
            Some("invalid") => Some(dlq::LetterClass::Invalid),
            Some("conflict") => Some(dlq::LetterClass::Conflict),
            Some("exhausted") => Some(dlq::LetterClass::Exhausted),
            Some(other) => {
                return Err(format!(
                    "No class `{other}`: invalid, conflict or exhausted."
                ))
            }
        };
        let kind = match set(self.kind.as_deref().unwrap_or_default()).as_deref() {
            None => None,
            Some("charge") => Some(dlq::LetterKind::Charge),
            Some("refund") => Some(dlq::LetterKind::Refund),
            Some(other) => return Err(format!("No kind `{other}`: charge or refund.")),
        };
        Ok(dlq::DeadLetterFilter {
            class,
            kind,
            ..Default::default()
        })
    }

    fn with_discarded(&self) -> bool {
        self.discarded.as_deref() == Some("1")
    }

    /// This query's link with `after` moved on.
    fn link(&self, after: u64) -> String {
        let mut link = format!("/console/dead-letters?after={after}");
        for (name, value) in [
            ("class", &self.class),
            ("kind", &self.kind),
            ("discarded", &self.discarded),
        ] {
            if let Some(value) = value.as_deref().and_then(set) {
                link.push_str(&format!("&{name}={}", urlencoding(&value)));
            }
        }
        link
    }
}

/// Percent-encodes a query value (letters, digits and `-_.~` pass).
fn urlencoding(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub(super) async fn dead_letters(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
    Query(query): Query<ListQuery>,
) -> Response {
    let filter = match query.filter() {
        Ok(filter) => filter,
        Err(why) => return bad_request(&session, &why),
    };
    let page_of = match dlq::page_dead_letters(
        &state.broker,
        &state.store,
        &filter,
        query.with_discarded(),
        query.after,
        Some(PAGE),
    )
    .await
    {
        Ok(page_of) => page_of,
        Err(err) => return failed(&session, format!("{err:#}")),
    };
    let letters = page_of.items;
    let now = OffsetDateTime::now_utc();
    let chosen = |value: &Option<String>, option: &str| value.as_deref() == Some(option);
    let body = html! {
        form #dead-letter-filter method="get" action="/console/dead-letters" {
            label for="filter-class" { "class" }
            select #filter-class name="class" {
                option value="" { "any" }
                @for class in ["invalid", "conflict", "exhausted"] {
                    option value=(class) selected[chosen(&query.class, class)] { (class) }
                }
            }
            label for="filter-kind" { "kind" }
            select #filter-kind name="kind" {
                option value="" { "any" }
                @for kind in ["charge", "refund"] {
                    option value=(kind) selected[chosen(&query.kind, kind)] { (kind) }
                }
            }
            label { input #filter-discarded type="checkbox" name="discarded" value="1" checked[query.with_discarded()]; " discarded ones too" }
            button type="submit" { "Show" }
        }
        p #dead-letter-count data-count=(letters.len()) {
            (letters.len()) " dead letter" @if letters.len() != 1 { "s" }
            @if query.after.is_some() { " after sequence " (query.after.unwrap_or_default()) }
            ", oldest first."
        }
        @if !letters.is_empty() {
            table #dead-letters-table {
                thead { tr { th { "sequence" } th { "dead-lettered" } th { "kind" } th { "class" } th { "deliveries" } th { "payment attempt" } th { "reason" } th { "discarded" } } }
                tbody {
                    @for d in &letters {
                        tr data-testid="dead-letter-row" data-sequence=(d.sequence) {
                            td { a .dead-letter-link href=(format!("/console/dead-letters/{}", d.sequence)) { (d.sequence) } }
                            td { (format::at_relative(d.time, now)) }
                            td .kind { (match d.kind { Some(dlq::LetterKind::Charge) => "charge", Some(dlq::LetterKind::Refund) => "refund", None => "-" }) }
                            td .class { (d.class.as_deref().unwrap_or("-")) }
                            td { (d.delivery_count.map(|c| c.to_string()).unwrap_or_else(|| "-".into())) }
                            td { (d.payment_attempt_id.as_deref().unwrap_or("-")) }
                            td .reason { (d.reason.as_deref().unwrap_or("-")) }
                            td .discarded { @if let Some(x) = &d.discarded { (x.actor) ": " (x.reason) } @else { "-" } }
                        }
                    }
                }
            }
        }
        @if let Some(next) = page_of.next {
            p { a #next-page href=(query.link(next)) { "Next " (PAGE) " →" } }
        }
        h2 { "Replay every letter of this filter" }
        p .hint { "Lists the letters the filter above matches (never discarded ones, at most 500) and asks you to confirm before anything is published; each replay is audited, and so is the whole." }
        form #bulk-replay-form method="post" action="/console/dead-letters/bulk-replay" {
            (csrf_field(&session))
            input type="hidden" name="class" value=(query.class.clone().unwrap_or_default());
            input type="hidden" name="kind" value=(query.kind.clone().unwrap_or_default());
            label for="bulk-reason" { "Reason (recorded in the audit trail)" }
            input #bulk-reason type="text" name="reason" maxlength="1000" required;
            button #bulk-replay-submit type="submit" { "Review the replay…" }
        }
    };
    page(StatusCode::OK, "Dead letters", Some(&session), body)
}

#[derive(Debug, Deserialize)]
pub(super) struct BulkReplayForm {
    #[serde(default)]
    class: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    reason: String,
    /// The previewed sequences, comma-separated, on the confirmation.
    #[serde(default)]
    sequences: Option<String>,
    #[serde(default)]
    confirm: Option<String>,
}

/// The bulk replay: a preview of what the filter matches, then, confirmed, the replay of
/// the previewed letters alone.
pub(super) async fn bulk_replay(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
    Form(form): Form<BulkReplayForm>,
) -> Response {
    let query = ListQuery {
        class: Some(form.class.clone()),
        kind: Some(form.kind.clone()),
        ..Default::default()
    };
    let filter = match query.filter() {
        Ok(filter) => filter,
        Err(why) => return bad_request(&session, &why),
    };
    let confirmed = form.confirm.as_deref() == Some("yes");
    let sequences = match form.sequences.as_deref().map(|list| {
        list.split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| s.trim().parse::<u64>())
            .collect::<Result<Vec<u64>, _>>()
    }) {
        None => None,
        Some(Ok(sequences)) => Some(sequences),
        Some(Err(_)) => return bad_request(&session, "The previewed sequences are not numbers."),
    };
    let request = dlq::BulkReplayRequest {
        filter,
        reason: form.reason.clone(),
        preview: !confirmed,
        max: None,
        sequences: if confirmed { sequences } else { None },
    };
    let outcome = match dlq::bulk_replay(
        &state.broker,
        &state.store,
        &request,
        &session.principal.actor,
        Via::Console,
    )
    .await
    {
        Ok(outcome) => outcome,
        Err(err) if err.is::<crate::config::UsageError>() => {
            return bad_request(&session, &err.to_string())
        }
        Err(err) => return failed(&session, format!("{err:#}")),
    };
    if outcome.preview {
        let listed = outcome
            .sequences
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let body = html! {
            p #bulk-summary data-count=(outcome.matched) { (outcome.matched) " dead letter" @if outcome.matched != 1 { "s" } " match: " (listed) }
            @if outcome.matched > 0 {
                form #bulk-confirm-form method="post" action="/console/dead-letters/bulk-replay" {
                    (csrf_field(&session))
                    input type="hidden" name="class" value=(form.class);
                    input type="hidden" name="kind" value=(form.kind);
                    input type="hidden" name="reason" value=(form.reason);
                    input type="hidden" name="sequences" value=(listed);
                    input type="hidden" name="confirm" value="yes";
                    button #bulk-confirm-submit type="submit" { "Confirm: replay these " (outcome.matched) }
                    " "
                    a href="/console/dead-letters" { "Cancel" }
                }
            }
        };
        return page(
            StatusCode::OK,
            "Confirm the bulk replay",
            Some(&session),
            body,
        );
    }
    let body = html! {
        p #bulk-result data-count=(outcome.items.len()) { (outcome.items.len()) " dead letter" @if outcome.items.len() != 1 { "s" } " taken:" }
        table #bulk-items {
            thead { tr { th { "sequence" } th { "outcome" } th { "detail" } } }
            tbody {
                @for item in &outcome.items {
                    tr data-testid="bulk-item" { td { (item.dlq_sequence) } td .outcome { (item.outcome) } td { (item.detail) } }
                }
            }
        }
    };
    page(StatusCode::OK, "Bulk replay", Some(&session), body)
}

/// The dead letter a path names (its sequence), or the page that says why there is none:
/// `missing` for a sequence that is not in the dead-letter stream.
async fn named_dead_letter(
    state: &AdminState,
    session: &Session,
    sequence: &str,
    missing: impl FnOnce(u64) -> Response,
) -> Result<(u64, dlq::DeadLetter), Response> {
    let Ok(sequence) = sequence.parse::<u64>() else {
        return Err(bad_request(
            session,
            "A dead letter is named by its sequence number.",
        ));
    };
    match dlq::find_dead_letter(&state.broker, &state.store, sequence).await {
        Ok(found) => found
            .map(|letter| (sequence, letter))
            .ok_or_else(|| missing(sequence)),
        Err(err) => Err(failed(session, format!("{err:#}"))),
    }
}

pub(super) async fn dead_letter(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
    Path(sequence): Path<String>,
) -> Response {
    let (sequence, letter) = match named_dead_letter(&state, &session, &sequence, |sequence| {
        page(
            StatusCode::NOT_FOUND,
            "No such dead letter",
            Some(&session),
            html! { p #not-found { "No dead letter " (sequence) " is in the dead-letter stream." } },
        )
    })
    .await
    {
        Ok(found) => found,
        Err(response) => return response,
    };
    let body = html! {
        dl #dead-letter-facts {
            dt { "sequence" } dd #dl-sequence { (letter.sequence) }
            dt { "dead-lettered" } dd { (format::at(letter.time)) }
            dt { "class" } dd #dl-class { (letter.class.as_deref().unwrap_or("-")) }
            dt { "reason" } dd #dl-reason { (letter.reason.as_deref().unwrap_or("-")) }
            dt { "original message id" } dd { (letter.original_msg_id.as_deref().unwrap_or("-")) }
            dt { "original subject" } dd { (letter.original_subject.as_deref().unwrap_or("-")) }
            dt { "deliveries" } dd { (letter.delivery_count.map(|c| c.to_string()).unwrap_or_else(|| "-".into())) }
            dt { "correlation id" } dd { (letter.correlation_id.as_deref().unwrap_or("-")) }
        }
        @if let Some(discarded) = &letter.discarded {
            p #dl-discarded .warning { "Discarded by " (discarded.actor) " " (format::at(discarded.discarded_at)) ": " (discarded.reason) ". It is not replayed." }
        }
        h2 { "Body" }
        pre #dead-letter-body { (letter.body) }
        @if letter.discarded.is_none() {
            h2 { "Discard" }
            p .hint { "Sets the letter aside for good: left out of the list, never replayed, kept in the stream until it ages out. The reason is required and recorded in the audit trail." }
            form #discard-form method="post" action=(format!("/console/dead-letters/{sequence}/discard")) {
                (csrf_field(&session))
                label for="discard-reason" { "Reason" }
                input #discard-reason type="text" name="reason" maxlength="1000" required;
                button #discard-submit type="submit" { "Review the discard…" }
            }
        }
        h2 { "Replay" }
        p .hint { "Replays the body below to the command subject. Leave it unchanged to replay the original (same message id), or correct it (a new message id). A body that is still not a valid command is refused." }
        form #replay-form method="post" action=(format!("/console/dead-letters/{sequence}/replay")) {
            (csrf_field(&session))
            textarea #replay-body name="body" rows="12" cols="100" { (letter.body) }
            label for="replay-reason" { "Reason (recorded in the audit trail)" }
            input #replay-reason type="text" name="reason" maxlength="1000";
            button #replay-submit type="submit" { "Review the replay…" }
        }
    };
    page(
        StatusCode::OK,
        &format!("Dead letter {sequence}"),
        Some(&session),
        body,
    )
}

#[derive(Debug, Deserialize)]
pub(super) struct ReplayForm {
    body: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    confirm: Option<String>,
}

pub(super) async fn replay(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
    Path(sequence): Path<String>,
    Form(form): Form<ReplayForm>,
) -> Response {
    let (sequence, letter) = match named_dead_letter(&state, &session, &sequence, |sequence| {
        refused(
            StatusCode::NOT_FOUND,
            Some(&session),
            &format!(
                "No dead letter {sequence} is in the dead-letter stream; nothing was published."
            ),
        )
    })
    .await
    {
        Ok(found) => found,
        Err(response) => return response,
    };
    // Browsers send a textarea's line breaks as CRLF: an untouched body is the original.
    let body = form.body.replace("\r\n", "\n");
    let corrected = (body != letter.body).then(|| body.clone().into_bytes());
    if form.confirm.as_deref() != Some("yes") {
        let page_body = html! {
            p #confirm-summary {
                "Replay dead letter " (sequence) " "
                @if corrected.is_some() { strong { "with the corrected body below" } " (a new message id)" } @else { "unchanged (its original message id)" }
                " to the command subject?"
            }
            pre #confirm-body { (body) }
            form #confirm-form method="post" action=(format!("/console/dead-letters/{sequence}/replay")) {
                (csrf_field(&session))
                input type="hidden" name="body" value=(body);
                input type="hidden" name="reason" value=(form.reason);
                input type="hidden" name="confirm" value="yes";
                button #confirm-submit type="submit" { "Confirm: replay" }
                " "
                a #confirm-cancel href=(format!("/console/dead-letters/{sequence}")) { "Cancel" }
            }
        };
        return page(
            StatusCode::OK,
            "Confirm the replay",
            Some(&session),
            page_body,
        );
    }
    match dlq::replay(
        &state.broker,
        &state.store,
        sequence,
        corrected,
        &session.principal.actor,
        Via::Console,
        set(&form.reason).as_deref(),
    )
    .await
    {
        Ok(replayed) => page(
            StatusCode::OK,
            "Replayed",
            Some(&session),
            html! {
                p #result .success { "Replayed dead letter " (replayed.dlq_sequence) " to " (replayed.subject) " as stream sequence " (replayed.stream_sequence) " with message id " code { (replayed.message_id) } "." }
                pre #replay-result { (replayed.render()) }
            },
        ),
        Err(err) if err.is::<crate::config::UsageError>() => {
            bad_request(&session, &err.to_string())
        }
        Err(err) if err.is::<dlq::DuplicateReplay>() => {
            refused(StatusCode::CONFLICT, Some(&session), &err.to_string())
        }
        Err(err) if err.is::<dlq::AlreadyDiscarded>() => {
            refused(StatusCode::CONFLICT, Some(&session), &err.to_string())
        }
        Err(err) => match err.downcast_ref::<dlq::ReplayNotAudited>() {
            Some(published) => {
                let what_happened = format!(
                    "Dead letter {} was replayed (stream sequence {}, message id {}): do not replay it again. Its audit entry could not be written.",
                    published.dlq_sequence, published.stream_sequence, published.message_id
                );
                failed_saying(&session, format!("{err:#}"), &what_happened)
            }
            None => failed(&session, format!("{err:#}")),
        },
    }
}

#[derive(Debug, Deserialize)]
pub(super) struct DiscardForm {
    #[serde(default)]
    reason: String,
    #[serde(default)]
    confirm: Option<String>,
}

/// A discard: a confirmation, then the letter set aside.
pub(super) async fn discard(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
    Path(sequence): Path<String>,
    Form(form): Form<DiscardForm>,
) -> Response {
    let (sequence, letter) = match named_dead_letter(&state, &session, &sequence, |sequence| {
        refused(
            StatusCode::NOT_FOUND,
            Some(&session),
            &format!(
                "No dead letter {sequence} is in the dead-letter stream; nothing was discarded."
            ),
        )
    })
    .await
    {
        Ok(found) => found,
        Err(response) => return response,
    };
    if set(&form.reason).is_none() {
        return bad_request(
            &session,
            "A discard needs a reason: the audit trail says why a command was given up.",
        );
    }
    if form.confirm.as_deref() != Some("yes") {
        let body = html! {
            p #confirm-summary { "Discard dead letter " (sequence) " (" (letter.class.as_deref().unwrap_or("-")) ": " (letter.reason.as_deref().unwrap_or("-")) ") for good? It will never be replayed." }
            p { "Reason: " (form.reason) }
            form #confirm-form method="post" action=(format!("/console/dead-letters/{sequence}/discard")) {
                (csrf_field(&session))
                input type="hidden" name="reason" value=(form.reason);
                input type="hidden" name="confirm" value="yes";
                button #confirm-submit type="submit" { "Confirm: discard" }
                " "
                a #confirm-cancel href=(format!("/console/dead-letters/{sequence}")) { "Cancel" }
            }
        };
        return page(StatusCode::OK, "Confirm the discard", Some(&session), body);
    }
    match dlq::discard(
        &state.broker,
        &state.store,
        sequence,
        &session.principal.actor,
        Via::Console,
        &form.reason,
    )
    .await
    {
        Ok(discarded) => page(
            StatusCode::OK,
            "Discarded",
            Some(&session),
            html! { p #result .success { "Discarded dead letter " (discarded.dlq_sequence) "." } },
        ),
        Err(err) if err.is::<crate::config::UsageError>() => {
            bad_request(&session, &err.to_string())
        }
        Err(err) if err.is::<dlq::AlreadyDiscarded>() => {
            refused(StatusCode::CONFLICT, Some(&session), &err.to_string())
        }
        Err(err) if err.is::<dlq::NoSuchDeadLetter>() => {
            refused(StatusCode::NOT_FOUND, Some(&session), &err.to_string())
        }
        Err(err) => failed(&session, format!("{err:#}")),
    }
}
