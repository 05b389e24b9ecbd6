//! Dead letters (`/console/dead-letters`): the list, one letter with its body, and its
//! replay (unchanged or corrected) after a confirmation.

use axum::extract::{Path, State};
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

pub(super) async fn dead_letters(
    State(state): State<AdminState>,
    Extension(session): Extension<Session>,
) -> Response {
    let letters = match dlq::list_dead_letters(&state.broker).await {
        Ok(letters) => letters,
        Err(err) => return failed(&session, format!("{err:#}")),
    };
    let now = OffsetDateTime::now_utc();
    let body = html! {
        p #dead-letter-count data-count=(letters.len()) { (letters.len()) " dead letter" @if letters.len() != 1 { "s" } ", oldest first." }
        @if !letters.is_empty() {
            table #dead-letters-table {
                thead { tr { th { "sequence" } th { "dead-lettered" } th { "class" } th { "deliveries" } th { "payment attempt" } th { "reason" } } }
                tbody {
                    @for d in &letters {
                        tr data-testid="dead-letter-row" data-sequence=(d.sequence) {
                            td { a .dead-letter-link href=(format!("/console/dead-letters/{}", d.sequence)) { (d.sequence) } }
                            td { (format::at_relative(d.time, now)) }
                            td .class { (d.class.as_deref().unwrap_or("-")) }
                            td { (d.delivery_count.map(|c| c.to_string()).unwrap_or_else(|| "-".into())) }
                            td { (d.payment_attempt_id.as_deref().unwrap_or("-")) }
                            td .reason { (d.reason.as_deref().unwrap_or("-")) }
                        }
                    }
                }
            }
        }
    };
    page(StatusCode::OK, "Dead letters", Some(&session), body)
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
    match dlq::list_dead_letters(&state.broker).await {
        Ok(letters) => letters
            .into_iter()
            .find(|d| d.sequence == sequence)
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
        h2 { "Body" }
        pre #dead-letter-body { (letter.body) }
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
