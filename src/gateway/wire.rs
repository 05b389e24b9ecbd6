//! What every connector shares when it reads the wire: the [`GatewayReply`] the client
//! turns a request's fate into (answered, not sent, lost), the headers some connectors read
//! besides ([`Hints`]), and the small readers each dialect's answer table uses
//! ([`parse_retry_after`], [`snippet`]). One copy each; the tables themselves live in their
//! connector's file.

use std::time::Duration;

use crate::domain::bounded;
use crate::domain::outcome::{GatewayOutcome, RetryAfter, MAX_REASON_CHARS, MAX_RETRY_AFTER};
use crate::domain::refund_call::{GatewayRefund, RefundOutcome};

/// What happened to one request on the wire, as the HTTP client saw it. Carries no I/O
/// types so that classification stays pure and testable.
#[derive(Debug, Clone, Copy)]
pub enum GatewayReply<'a> {
    /// A complete HTTP response arrived.
    Answered {
        status: u16,
        /// The `Idempotent-Replayed: true` header was present.
        replayed: bool,
        /// The raw `Retry-After` header, if any.
        retry_after: Option<&'a str>,
        body: &'a [u8],
    },
    /// The request never left this process: connection refused, DNS failure, connect
    /// timeout. The gateway cannot have charged.
    NotSent { error: &'a str },
    /// The request was (or may have been) sent and no complete answer came back: a
    /// timeout, or the connection closed after sending. The gateway may have charged.
    Lost { error: &'a str },
}

/// The parts of a complete answer ([`GatewayReply::Answered`]).
#[derive(Debug, Clone, Copy)]
pub struct Answer<'a> {
    pub status: u16,
    pub replayed: bool,
    pub retry_after: Option<&'a str>,
    pub body: &'a [u8],
}

impl<'a> GatewayReply<'a> {
    /// The answer to a request that can charge, or, when none came, its outcome:
    /// `NotSent` (nothing reached the gateway) or `Ambiguous` (it may have charged), the
    /// reason naming `request` ("the request", "the confirm of pi_…"). Every connector reads
    /// the missing answer of a charging call this one way.
    pub fn charge_answer(self, request: &str) -> Result<Answer<'a>, GatewayOutcome> {
        self.answer_or(
            request,
            |reason| GatewayOutcome::NotSent { reason },
            |reason| GatewayOutcome::Ambiguous { reason },
        )
    }

    /// The answer to a refund request, or, when none came, its outcome: `NotSent`, or
    /// `Ambiguous` (it may have refunded). Both connectors read a missing answer this way.
    pub fn refund_answer(self) -> Result<Answer<'a>, RefundOutcome> {
        self.answer_or(
            "the refund",
            |reason| RefundOutcome::NotSent { reason },
            |reason| RefundOutcome::Ambiguous { reason },
        )
    }

    /// The answer, or what its absence means for a call that can move money: `not_sent`
    /// when nothing reached the gateway, `lost` when `request` was sent and no answer came
    /// (it may have moved the money); each with its reason, bounded.
    fn answer_or<O>(
        self,
        request: &str,
        not_sent: impl FnOnce(String) -> O,
        lost: impl FnOnce(String) -> O,
    ) -> Result<Answer<'a>, O> {
        match self {
            GatewayReply::NotSent { error } => Err(not_sent(bounded(error, MAX_REASON_CHARS))),
            GatewayReply::Lost { error } => Err(lost(bounded(
                &format!("no answer after {request} was sent: {error}"),
                MAX_REASON_CHARS,
            ))),
            GatewayReply::Answered {
                status,
                replayed,
                retry_after,
                body,
            } => Ok(Answer {
                status,
                replayed,
                retry_after,
                body,
            }),
        }
    }
}

impl Answer<'_> {
    /// What both dialects read alike in an answer to a refund request: a 2xx carrying the
    /// refund (`R`, the dialect's body; unreadable, it may have refunded), 409 (the key is
    /// in progress) and 429 (retry after the gateway's wait), each 4xx with the gateway's
    /// words from `said`. `None` for every other status: the dialect's own table decides.
    pub fn common_refund_outcome<R>(&self, said: impl FnOnce() -> String) -> Option<RefundOutcome>
    where
        R: serde::de::DeserializeOwned + Into<GatewayRefund>,
    {
        let status = self.status;
        Some(match status {
            200..=299 => match serde_json::from_slice::<R>(self.body) {
                Ok(refund) => RefundOutcome::Answered(Box::new(refund.into())),
                Err(_) => RefundOutcome::Ambiguous {
                    reason: bounded(
                        &format!(
                            "HTTP {status} without a readable refund: {}",
                            snippet(self.body)
                        ),
                        MAX_REASON_CHARS,
                    ),
                },
            },
            409 => RefundOutcome::RetryLater {
                after: RetryAfter::InProgress,
                reason: said(),
            },
            429 => RefundOutcome::RetryLater {
                after: self
                    .retry_after
                    .and_then(parse_retry_after)
                    .map_or(RetryAfter::Backoff, RetryAfter::Delay),
                reason: said(),
            },
            _ => return None,
        })
    }
}

/// Headers some connectors read besides the status and body.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hints {
    /// Stripe's `Stripe-Should-Retry`, when present.
    pub should_retry: Option<bool>,
}

/// `Retry-After` in delta-seconds (the form the contract names), capped at
/// [`MAX_RETRY_AFTER`]: a number too large for a `u64` (or for any clock) is the cap, not an
/// error. An HTTP date or anything else that is not plain digits is not honoured: the caller
/// falls back to its own backoff.
pub fn parse_retry_after(raw: &str) -> Option<Duration> {
    let digits = raw.trim();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let seconds = digits.parse::<u64>().unwrap_or(u64::MAX);
    Some(Duration::from_secs(seconds).min(MAX_RETRY_AFTER))
}

/// The start of a body, for a reason or error: at most 300 characters, trimmed.
pub fn snippet(body: &[u8]) -> String {
    bounded(String::from_utf8_lossy(body).trim(), 300)
}
