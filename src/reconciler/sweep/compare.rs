//! The sweep's decision, pure: what the gateway's records naming one attempt (or one
//! unknown reference) mean, given what onecharge holds. No I/O; every row of the table in
//! docs/operations.md ("Reconciliation findings") is a test below.
//!
//! - `unknown`/`needs_review` with money taken: evidence, handed to the reconciler's own
//!   decision ([`Action::Settle`]) as a lookup's answer would be.
//! - `pending` with money taken under its own key or object: the executor's re-send under
//!   that key replays it ([`Action::MakeDue`]); under anything else, a finding (a re-send
//!   would take the money again).
//! - `declined`/`expired` with money taken: `charged_not_recorded`. A final attempt is never
//!   changed here.
//! - `succeeded` whose own charge is missing (inside the window), or listed as declined,
//!   cancelled, refunded or unsettled: `recorded_not_charged`; disputed: `disputed`, with
//!   where the dispute stands (`dispute:inquiry`, `dispute:open`, `dispute:won`,
//!   `dispute:lost`) as evidence, one charge's history with its refunds (decisions 131,
//!   240).
//! - More than one charge holding money: `charged_twice`; a charge holding money whose
//!   amount, currency or customer differ from the attempt's: `mismatch`.
//! - Money taken for an attempt id onecharge does not know: `unknown_reference`.
//!
//! Over 600 lines only with its tests: each rule above is a test below.

use crate::domain::finding::{FindingClass, NewFinding};
use crate::domain::listing::{DisputeStatus, ListedCharge, ListedStatus};
use crate::domain::outcome::{ChargeStatus, GatewayCharge};
use crate::domain::AttemptStatus;
pub use crate::store::findings::sweep::SweptAttempt;

impl SweptAttempt {
    /// Whether `record` is this attempt's own charge: its stored charge or object id, or
    /// its key.
    fn owns(&self, record: &ListedCharge) -> bool {
        self.gateway_charge_id.as_deref() == Some(record.id.as_str())
            || self.gateway_object_id.as_deref() == Some(record.id.as_str())
            || record.idempotency_key.as_deref() == Some(self.idempotency_key.as_str())
    }
}

/// What to do about one attempt, besides recording findings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Nothing,
    /// Hand these charges to the reconciler's decision as a lookup's answer.
    Settle(Vec<GatewayCharge>),
    /// A `pending` attempt whose charge the gateway holds under its key: due now, so the
    /// executor's re-send replays it.
    MakeDue,
}

/// The decision for one attempt (or one unknown reference).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub findings: Vec<NewFinding>,
    pub action: Action,
}

/// Holds money: charged and not given back (an inquiry moves no money; a disputed charge
/// is still taken until the bank decides, and again once the dispute is won; a lost one
/// went back).
fn holds_money(record: &ListedCharge) -> bool {
    matches!(
        record.status,
        ListedStatus::Succeeded
            | ListedStatus::Disputed(
                DisputeStatus::Inquiry | DisputeStatus::Open | DisputeStatus::Won
            )
    )
}

/// How much the gateway shows refunded of `record`, when it shows any: its
/// `amount_refunded`, or the whole amount of a record listed `refunded` without one.
fn refunded_of(record: &ListedCharge) -> Option<i64> {
    match (record.amount_refunded.filter(|r| *r > 0), &record.status) {
        (Some(refunded), ListedStatus::Succeeded | ListedStatus::Refunded) => Some(refunded),
        (None, ListedStatus::Refunded) => Some(record.amount_minor.unwrap_or(i64::MAX)),
        _ => None,
    }
}

/// Compares the records naming `reference` with the attempt it names (`None`: onecharge
/// knows no such attempt). Findings come in a fixed order: mismatches, then what the
/// attempt's status makes of the money, then a charge taken twice.
pub fn compare(
    reference: &str,
    attempt: Option<&SweptAttempt>,
    records: &[ListedCharge],
) -> Verdict {
    let held: Vec<&ListedCharge> = records.iter().filter(|r| holds_money(r)).collect();
    let Some(attempt) = attempt else {
        return Verdict {
            findings: held
                .iter()
                .map(|r| unknown_reference(reference, r))
                .collect(),
            action: Action::Nothing,
        };
    };
    let case = Case {
        reference,
        attempt,
        records,
        held,
    };
    let mut findings = case.mismatches();
    let mut held_ids: Vec<String> = case.held.iter().map(|r| r.id.to_string()).collect();
    let action = case.by_status(&mut held_ids, &mut findings);
    findings.extend(case.charged_twice(&held_ids));
    Verdict { findings, action }
}

/// Money taken under `reference`, an attempt id onecharge does not know.
fn unknown_reference(reference: &str, record: &ListedCharge) -> NewFinding {
    NewFinding {
        class: FindingClass::UnknownReference,
        payment_attempt_id: None,
        reference: Some(reference.to_owned()),
        gateway_ids: vec![record.id.to_string()],
        evidence: record.evidence(),
        attempt_status: None,
        attempt_amount_minor: None,
        attempt_currency: None,
        gateway_amount_minor: record.amount_minor,
        gateway_currency: record.currency.clone(),
        detail: format!(
            "the gateway's charge {} names attempt `{reference}`, which onecharge does not know: \
             money taken outside onecharge under its metadata",
            record.id
        ),
    }
}

/// One known attempt and the records naming it, while they are compared.
struct Case<'a> {
    reference: &'a str,
    attempt: &'a SweptAttempt,
    records: &'a [ListedCharge],
    /// The records holding money.
    held: Vec<&'a ListedCharge>,
}

impl Case<'_> {
    /// A finding about this attempt, naming the gateway's `ids` (sorted, once each), what
    /// the gateway showed (`evidence`) and, when one charge is meant, its amount and
    /// currency.
    fn finding(
        &self,
        class: FindingClass,
        mut ids: Vec<String>,
        evidence: String,
        detail: String,
        gateway: Option<&ListedCharge>,
    ) -> NewFinding {
        ids.sort();
        ids.dedup();
        NewFinding {
            class,
            payment_attempt_id: Some(self.attempt.payment_attempt_id),
            reference: Some(self.reference.to_owned()),
            gateway_ids: ids,
            evidence,
            attempt_status: Some(self.attempt.status.as_str().to_owned()),
            attempt_amount_minor: Some(self.attempt.money.amount_minor()),
            attempt_currency: Some(self.attempt.money.currency().code().to_owned()),
            gateway_amount_minor: gateway.and_then(|g| g.amount_minor),
            gateway_currency: gateway.and_then(|g| g.currency.clone()),
            detail,
        }
    }

    /// What the charges holding money show, as evidence (each one's, sorted).
    fn held_evidence(&self) -> String {
        let mut each: Vec<String> = self
            .held
            .iter()
            .map(|r| format!("{}={}", r.id, r.evidence()))
            .collect();
        each.sort();
        each.join(",")
    }

    /// Every charge holding money whose amount, currency or customer is not the attempt's.
    fn mismatches(&self) -> Vec<NewFinding> {
        self.held
            .iter()
            .filter_map(|record| {
                let (why, evidence) = differs(record, self.attempt)?;
                Some(self.finding(
                    FindingClass::Mismatch,
                    vec![record.id.to_string()],
                    evidence,
                    format!(
                        "the gateway's charge {} differs from the attempt: {why}",
                        record.id
                    ),
                    Some(record),
                ))
            })
            .collect()
    }

    /// What the attempt's status makes of the money held: a finding, evidence for the
    /// reconciler, or a re-send made due. A succeeded attempt's recorded charge created
    /// outside the window joins `held_ids`.
    fn by_status(&self, held_ids: &mut Vec<String>, findings: &mut Vec<NewFinding>) -> Action {
        let attempt = self.attempt;
        let holds = !self.held.is_empty();
        match attempt.status {
            AttemptStatus::Succeeded => {
                findings.extend(self.succeeded(held_ids));
                Action::Nothing
            }
            AttemptStatus::Unknown | AttemptStatus::NeedsReview if holds => {
                Action::Settle(self.records.iter().map(|r| as_lookup(r, attempt)).collect())
            }
            AttemptStatus::Pending if holds => {
                if self.held.iter().any(|r| attempt.owns(r)) {
                    return Action::MakeDue;
                }
                findings.push(self.finding(
                    FindingClass::ChargedNotRecorded,
                    held_ids.clone(),
                    self.held_evidence(),
                    format!(
                        "the gateway holds money for this pending attempt under another key ({}); \
                         its own send would charge again",
                        held_ids.join(", ")
                    ),
                    self.held.first().copied(),
                ));
                Action::Nothing
            }
            AttemptStatus::Declined | AttemptStatus::Expired if holds => {
                findings.push(self.finding(
                    FindingClass::ChargedNotRecorded,
                    held_ids.clone(),
                    self.held_evidence(),
                    format!(
                        "the attempt is {}, but the gateway took money for it ({}): refund, or correct the record",
                        attempt.status,
                        held_ids.join(", ")
                    ),
                    self.held.first().copied(),
                ));
                Action::Nothing
            }
            _ => Action::Nothing,
        }
    }

    /// A succeeded attempt: its own charge must be listed as succeeded, or, when it was
    /// not listed and the attempt is inside the window, it is missing. One created outside
    /// the window is not listed but holds money too: it joins `held_ids`.
    fn succeeded(&self, held_ids: &mut Vec<String>) -> Option<NewFinding> {
        let own = self.records.iter().find(|r| self.attempt.owns(r));
        match (own, self.attempt.gateway_charge_id.as_deref()) {
            (Some(own), _) if matches!(own.status, ListedStatus::Disputed(_)) => {
                Some(self.disputed(own))
            }
            (Some(own), _)
                if matches!(own.status, ListedStatus::Succeeded | ListedStatus::Refunded)
                    && (refunded_of(own).is_some()
                        || self.attempt.own_refunds.refunded_surely > 0) =>
            {
                self.refunded(own)
            }
            (Some(own), _) if own.status != ListedStatus::Succeeded => Some(self.finding(
                FindingClass::RecordedNotCharged,
                vec![own.id.to_string()],
                own.evidence(),
                format!(
                    "the attempt is succeeded, but the gateway holds its charge {} as {}",
                    own.id,
                    own.status.as_str()
                ),
                Some(own),
            )),
            (None, Some(recorded)) if self.attempt.in_window => Some(self.finding(
                FindingClass::RecordedNotCharged,
                vec![recorded.to_owned()],
                "missing".to_owned(),
                format!(
                    "the attempt is succeeded with charge {recorded}, which the gateway does not list in the window"
                ),
                None,
            )),
            (None, Some(recorded)) => {
                // Created outside the window: not listed, but it holds money too.
                held_ids.push(recorded.to_owned());
                None
            }
            _ => None,
        }
    }

    /// A succeeded attempt's own charge that the gateway shows (partly) refunded, weighed
    /// against onecharge's own refunds of it (contract §2.5): what they explain is no
    /// finding; more refunded than they can account for was refunded outside onecharge
    /// (`recorded_not_charged`, evidence `refunded:<n>`); less than they surely refunded
    /// means a refund onecharge recorded the gateway does not show: the customer may not
    /// have their money (`charged_not_recorded`, evidence `refunds_unlisted:<n>`).
    fn refunded(&self, own: &ListedCharge) -> Option<NewFinding> {
        let listed = refunded_of(own).unwrap_or(0);
        let ours = self.attempt.own_refunds;
        let id = &own.id;
        if listed > ours.refunded_at_most {
            let detail = if ours.refunded_at_most == 0 {
                format!(
                    "the attempt is succeeded, but the gateway holds its charge {id} as {} ({listed} refunded), and onecharge made no refund of it",
                    own.status.as_str()
                )
            } else {
                format!(
                    "the gateway shows {listed} refunded of charge {id}, more than onecharge's own refunds of it account for ({}): the rest was refunded outside onecharge",
                    ours.refunded_at_most
                )
            };
            return Some(self.finding(
                FindingClass::RecordedNotCharged,
                vec![id.to_string()],
                own.evidence(),
                detail,
                Some(own),
            ));
        }
        if listed < ours.refunded_surely {
            return Some(self.finding(
                FindingClass::ChargedNotRecorded,
                vec![id.to_string()],
                format!("refunds_unlisted:{}", ours.refunded_surely - listed),
                format!(
                    "onecharge's refunds of charge {id} succeeded for {} in all, but the gateway shows only {listed} refunded: a refund onecharge recorded is not at the gateway, and the customer may not have their money",
                    ours.refunded_surely
                ),
                Some(own),
            ));
        }
        None
    }

    /// A succeeded attempt's own charge, disputed: the finding says where the dispute stands
    /// and what it means for the money.
    fn disputed(&self, own: &ListedCharge) -> NewFinding {
        let id = &own.id;
        let detail = match own.status {
            ListedStatus::Disputed(DisputeStatus::Won) => format!(
                "the dispute of charge {id} was decided for the merchant (or the inquiry \
                 closed): the money was reinstated and nothing is owed"
            ),
            ListedStatus::Disputed(DisputeStatus::Lost) => format!(
                "the dispute of charge {id} was lost: the money went back to the customer; \
                 the attempt stays succeeded, so tell whoever owns the order"
            ),
            ListedStatus::Disputed(DisputeStatus::Inquiry) => format!(
                "the customer's bank opened an inquiry about charge {id} of this succeeded \
                 attempt: no money has moved yet; answer it at the gateway before it \
                 escalates to a chargeback (which would be a finding of its own)"
            ),
            _ => format!(
                "the customer's bank disputes charge {id} of this succeeded attempt: the money \
                 is held back until the bank decides; answer the dispute at the gateway"
            ),
        };
        self.finding(
            FindingClass::Disputed,
            vec![id.to_string()],
            own.evidence(),
            detail,
            Some(own),
        )
    }

    /// More than one charge holding money for the attempt.
    fn charged_twice(&self, held_ids: &[String]) -> Option<NewFinding> {
        if held_ids.len() <= 1 {
            return None;
        }
        let mut ids = held_ids.to_vec();
        ids.sort();
        Some(self.finding(
            FindingClass::ChargedTwice,
            ids.clone(),
            String::new(),
            format!(
                "{} charges hold money for one attempt ({}): refund all but one",
                ids.len(),
                ids.join(", ")
            ),
            None,
        ))
    }
}

/// Why a charge holding money is not the attempt's amount, currency or customer, and the
/// gateway's differing values as evidence (`amount_minor=2999;currency=USD`).
fn differs(record: &ListedCharge, attempt: &SweptAttempt) -> Option<(String, String)> {
    let mut why = Vec::new();
    let mut evidence = Vec::new();
    if let Some(amount) = record.amount_minor {
        if amount != attempt.money.amount_minor() {
            why.push(format!(
                "amount_minor {amount}, the attempt's is {}",
                attempt.money.amount_minor()
            ));
            evidence.push(format!("amount_minor={amount}"));
        }
    }
    if let Some(currency) = &record.currency {
        if !currency.eq_ignore_ascii_case(attempt.money.currency().code()) {
            why.push(format!(
                "currency {currency}, the attempt's is {}",
                attempt.money.currency()
            ));
            evidence.push(format!("currency={currency}"));
        }
    }
    if let Some(customer) = &record.customer {
        if customer != &attempt.customer_id {
            why.push(format!(
                "customer {customer}, the attempt's is {}",
                attempt.customer_id
            ));
            evidence.push(format!("customer={customer}"));
        }
    }
    (!why.is_empty()).then(|| (why.join("; "), evidence.join(";")))
}

/// A listed record as the reconciler's lookup answer: the attempt's own charge carries its
/// key (the stored id is the link, as a lookup by id has it); any other carries what the
/// gateway said, so the decision refuses to adopt it.
fn as_lookup(record: &ListedCharge, attempt: &SweptAttempt) -> GatewayCharge {
    GatewayCharge {
        id: record.id.clone(),
        status: match &record.status {
            ListedStatus::Succeeded | ListedStatus::Disputed(_) | ListedStatus::Refunded => {
                ChargeStatus::Succeeded
            }
            ListedStatus::Declined | ListedStatus::Canceled => ChargeStatus::Declined,
            ListedStatus::Other(other) => ChargeStatus::Other(other.clone()),
        },
        decline_code: None,
        idempotency_key: if attempt.owns(record) {
            Some(attempt.idempotency_key.to_string())
        } else {
            record.idempotency_key.clone()
        },
        reference: record.reference.clone(),
        amount_minor: record.amount_minor,
        currency: record.currency.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::GatewayChargeId;

    const ATTEMPT: &str = "6f1c2a9e-3d4b-4f7a-9c1e-2b8d5e7f0a11";

    fn attempt(status: AttemptStatus) -> SweptAttempt {
        SweptAttempt {
            payment_attempt_id: ATTEMPT.parse::<uuid::Uuid>().unwrap().into(),
            status,
            money: crate::domain::Money::of(1999, "EUR").unwrap(),
            customer_id: "cus_42".into(),
            idempotency_key: crate::domain::IdempotencyKey::for_attempt(ATTEMPT.parse().unwrap()),
            gateway_charge_id: (status == AttemptStatus::Succeeded)
                .then(|| GatewayChargeId::from_gateway("ch_own")),
            gateway_object_id: None,
            in_window: true,
            own_refunds: Default::default(),
        }
    }

    fn record(id: &str, status: ListedStatus) -> ListedCharge {
        ListedCharge {
            id: GatewayChargeId::from_gateway(id),
            status,
            reference: Some(ATTEMPT.into()),
            amount_minor: Some(1999),
            currency: Some("EUR".into()),
            customer: Some("cus_42".into()),
            idempotency_key: Some(if id == "ch_own" {
                format!("onecharge-{ATTEMPT}")
            } else {
                format!("other-{id}")
            }),
            amount_refunded: None,
        }
    }

    fn classes(verdict: &Verdict) -> Vec<FindingClass> {
        let mut classes: Vec<_> = verdict.findings.iter().map(|f| f.class).collect();
        classes.sort();
        classes
    }

    use AttemptStatus::*;
    use FindingClass::*;

    #[test]
    fn onecharges_own_refunds_explain_what_the_gateway_shows_refunded_and_nothing_more() {
        use crate::store::findings::sweep::OwnRefunds;
        let with_refunds = |surely, at_most| SweptAttempt {
            own_refunds: OwnRefunds {
                refunded_surely: surely,
                refunded_at_most: at_most,
            },
            ..attempt(Succeeded)
        };
        let listed = |status, refunded| {
            vec![ListedCharge {
                amount_refunded: Some(refunded),
                ..record("ch_own", status)
            }]
        };
        let verdict = |attempt: &SweptAttempt, records: &[ListedCharge]| {
            compare(ATTEMPT, Some(attempt), records)
        };
        // Exactly onecharge's succeeded refund, partly or wholly: no finding.
        let ours = with_refunds(500, 500);
        assert!(verdict(&ours, &listed(L::Succeeded, 500))
            .findings
            .is_empty());
        assert!(
            verdict(&with_refunds(1999, 1999), &listed(L::Refunded, 1999))
                .findings
                .is_empty()
        );
        // A refund of onecharge's still processing may or may not show yet.
        let processing = with_refunds(0, 500);
        assert!(verdict(&processing, &listed(L::Succeeded, 500))
            .findings
            .is_empty());
        // More than onecharge refunded: the rest was refunded outside it.
        let more = verdict(&ours, &listed(L::Refunded, 800));
        assert_eq!(classes(&more), [RecordedNotCharged]);
        assert_eq!(more.findings[0].evidence, "refunded:800");
        assert!(
            more.findings[0].detail.contains("outside onecharge"),
            "{}",
            more.findings[0].detail
        );
        // A partial refund outside onecharge, with none of its own: a finding too.
        let outside = verdict(&attempt(Succeeded), &listed(L::Succeeded, 300));
        assert_eq!(classes(&outside), [RecordedNotCharged]);
        // Less than onecharge surely refunded: its refund is not at the gateway.
        let missing = verdict(&ours, &listed(L::Succeeded, 0));
        assert_eq!(classes(&missing), [ChargedNotRecorded]);
        assert_eq!(missing.findings[0].evidence, "refunds_unlisted:500");
        let short = verdict(&with_refunds(800, 800), &listed(L::Succeeded, 500));
        assert_eq!(classes(&short), [ChargedNotRecorded]);
        assert_eq!(short.findings[0].evidence, "refunds_unlisted:300");
    }
    use ListedStatus as L;

    /// (attempt status, records, expected finding classes, expected action kind)
    #[test]
    fn each_row_of_the_table() {
        let own = || record("ch_own", L::Succeeded);
        let other = || record("ch_other", L::Succeeded);
        let settle = "settle";
        let due = "due";
        let none = "nothing";
        let rows: Vec<(AttemptStatus, Vec<ListedCharge>, Vec<FindingClass>, &str)> = vec![
            // The ledger and the gateway agree.
            (Succeeded, vec![own()], vec![], none),
            (Declined, vec![record("ch_own", L::Declined)], vec![], none),
            // Money taken for an attempt onecharge cannot settle by itself.
            (Declined, vec![own()], vec![ChargedNotRecorded], none),
            (Expired, vec![other()], vec![ChargedNotRecorded], none),
            // Evidence for what the reconciler owns.
            (Unknown, vec![own()], vec![], settle),
            (NeedsReview, vec![own()], vec![], settle),
            (Unknown, vec![record("ch_own", L::Declined)], vec![], none),
            (Pending, vec![own()], vec![], due),
            (Pending, vec![other()], vec![ChargedNotRecorded], none),
            (InFlight, vec![own()], vec![], none),
            // A succeeded attempt the gateway does not back.
            (Succeeded, vec![], vec![RecordedNotCharged], none),
            (
                Succeeded,
                vec![record("ch_own", L::Refunded)],
                vec![RecordedNotCharged],
                none,
            ),
            (
                Succeeded,
                vec![record("ch_own", L::Disputed(DisputeStatus::Open))],
                vec![Disputed],
                none,
            ),
            (
                Succeeded,
                vec![record("ch_own", L::Disputed(DisputeStatus::Won))],
                vec![Disputed],
                none,
            ),
            (
                Succeeded,
                vec![record("ch_own", L::Disputed(DisputeStatus::Lost))],
                vec![Disputed],
                none,
            ),
            // A lost dispute gave the money back: a second charge is not twice.
            (
                Succeeded,
                vec![
                    record("ch_own", L::Succeeded),
                    record("ch_other", L::Disputed(DisputeStatus::Lost)),
                ],
                vec![],
                none,
            ),
            (
                Succeeded,
                vec![record("ch_own", L::Canceled)],
                vec![RecordedNotCharged],
                none,
            ),
            (
                Succeeded,
                vec![record("ch_own", L::Declined)],
                vec![RecordedNotCharged],
                none,
            ),
            // Twice.
            (Succeeded, vec![own(), other()], vec![ChargedTwice], none),
            (Unknown, vec![own(), other()], vec![ChargedTwice], settle),
            // A refunded second charge holds no money.
            (
                Succeeded,
                vec![own(), record("ch_other", L::Refunded)],
                vec![],
                none,
            ),
        ];
        for (status, records, expected, action) in rows {
            let verdict = compare(ATTEMPT, Some(&attempt(status)), &records);
            assert_eq!(classes(&verdict), expected, "{status} {records:?}");
            let got = match verdict.action {
                Action::Nothing => none,
                Action::Settle(_) => settle,
                Action::MakeDue => due,
            };
            assert_eq!(got, action, "{status} {records:?}");
        }
    }

    #[test]
    fn a_changed_amount_currency_or_customer_is_a_mismatch_saying_which() {
        for (change, word) in [
            (
                (|r: &mut ListedCharge| r.amount_minor = Some(2999)) as fn(&mut ListedCharge),
                "amount_minor 2999",
            ),
            (|r| r.currency = Some("USD".into()), "currency USD"),
            (|r| r.customer = Some("cus_9".into()), "customer cus_9"),
        ] {
            let mut changed = record("ch_own", L::Succeeded);
            change(&mut changed);
            let verdict = compare(ATTEMPT, Some(&attempt(Succeeded)), &[changed]);
            assert_eq!(classes(&verdict), vec![Mismatch]);
            assert!(
                verdict.findings[0].detail.contains(word),
                "{:?}",
                verdict.findings
            );
        }
    }

    #[test]
    fn money_for_an_unknown_attempt_is_one_finding_per_charge_and_declines_are_none() {
        let verdict = compare(
            "not-ours",
            None,
            &[
                record("ch_a", L::Succeeded),
                record("ch_b", L::Declined),
                record("ch_c", L::Disputed(DisputeStatus::Open)),
            ],
        );
        assert_eq!(classes(&verdict), vec![UnknownReference, UnknownReference]);
        assert_eq!(verdict.findings[0].reference.as_deref(), Some("not-ours"));
        assert_eq!(verdict.findings[0].payment_attempt_id, None);
    }

    #[test]
    fn a_succeeded_attempt_settled_outside_the_window_is_not_missing_but_still_counts_as_held() {
        let mut outside = attempt(Succeeded);
        outside.in_window = false;
        assert!(compare(ATTEMPT, Some(&outside), &[]).findings.is_empty());
        let verdict = compare(ATTEMPT, Some(&outside), &[record("ch_other", L::Succeeded)]);
        assert_eq!(classes(&verdict), vec![ChargedTwice]);
        assert_eq!(verdict.findings[0].gateway_ids, vec!["ch_other", "ch_own"]);
    }

    #[test]
    fn the_evidence_carries_the_key_only_for_the_attempts_own_charge() {
        let mut stripe = attempt(Unknown);
        stripe.gateway_object_id = Some(crate::domain::GatewayObjectId::from_gateway("pi_own"));
        let mut own = record("pi_own", L::Succeeded);
        own.idempotency_key = None;
        let mut foreign = record("pi_other", L::Succeeded);
        foreign.idempotency_key = None;
        let Action::Settle(charges) = compare(ATTEMPT, Some(&stripe), &[own, foreign]).action
        else {
            panic!()
        };
        assert_eq!(
            charges[0].idempotency_key.as_deref(),
            Some(stripe.idempotency_key.as_str())
        );
        assert_eq!(charges[1].idempotency_key, None);
    }

    #[test]
    fn each_aftermath_of_one_charge_is_its_own_finding() {
        let evidence_of = |record: ListedCharge| {
            let verdict = compare(ATTEMPT, Some(&attempt(Succeeded)), &[record]);
            assert_eq!(verdict.findings.len(), 1);
            (
                verdict.findings[0].subject_key(),
                verdict.findings[0].dedupe_key(),
            )
        };
        let refunded = |amount| ListedCharge {
            amount_refunded: Some(amount),
            ..record("ch_own", L::Refunded)
        };
        let disputed = |status| ListedCharge {
            amount_refunded: Some(500),
            ..record("ch_own", L::Disputed(status))
        };
        let (subject, first) = evidence_of(refunded(500));
        let (_, second) = evidence_of(refunded(800));
        let (dispute_subject, dispute) = evidence_of(disputed(DisputeStatus::Open));
        let (_, lost) = evidence_of(disputed(DisputeStatus::Lost));
        let (_, won) = evidence_of(disputed(DisputeStatus::Won));
        let (missing_subject, missing) = evidence_of_missing();
        assert!(first.ends_with("|refunded:500"), "{first}");
        assert!(second.ends_with("|refunded:800"), "{second}");
        assert!(dispute.ends_with("|dispute:open;refunded:500"), "{dispute}");
        assert!(lost.ends_with("|dispute:lost;refunded:500"), "{lost}");
        assert!(won.ends_with("|dispute:won;refunded:500"), "{won}");
        assert!(missing.ends_with("|missing"), "{missing}");
        assert_eq!(subject, missing_subject, "one charge's history");
        assert_eq!(subject, dispute_subject, "its dispute too");
        assert_eq!(
            evidence_of(refunded(500)).1,
            first,
            "the same evidence, the same finding"
        );

        fn evidence_of_missing() -> (String, String) {
            let verdict = compare(ATTEMPT, Some(&attempt(Succeeded)), &[]);
            (
                verdict.findings[0].subject_key(),
                verdict.findings[0].dedupe_key(),
            )
        }
    }

    #[test]
    fn an_inquiry_and_the_chargeback_it_escalates_to_are_different_evidence() {
        let finding = |status| {
            let verdict = compare(
                ATTEMPT,
                Some(&attempt(Succeeded)),
                &[record("ch_own", L::Disputed(status))],
            );
            assert_eq!(classes(&verdict), [Disputed]);
            verdict.findings[0].clone()
        };
        let inquiry = finding(DisputeStatus::Inquiry);
        let chargeback = finding(DisputeStatus::Open);
        assert_eq!(inquiry.evidence, "dispute:inquiry");
        assert_eq!(chargeback.evidence, "dispute:open");
        assert_ne!(
            inquiry.dedupe_key(),
            chargeback.dedupe_key(),
            "a resolved inquiry must not swallow the chargeback"
        );
        assert_eq!(
            inquiry.subject_key(),
            chargeback.subject_key(),
            "one history"
        );
        assert!(inquiry.detail.contains("inquiry"), "{}", inquiry.detail);
        assert!(
            chargeback
                .detail
                .contains("held back until the bank decides"),
            "{}",
            chargeback.detail
        );
    }

    #[test]
    fn a_won_dispute_says_the_money_was_reinstated_and_a_lost_one_that_it_went_back() {
        let said = |status| {
            let verdict = compare(
                ATTEMPT,
                Some(&attempt(Succeeded)),
                &[record("ch_own", L::Disputed(status))],
            );
            let finding = &verdict.findings[0];
            assert_eq!(finding.class, Disputed);
            (finding.evidence.clone(), finding.detail.clone())
        };
        let (evidence, detail) = said(DisputeStatus::Won);
        assert_eq!(evidence, "dispute:won");
        assert!(
            detail.contains("reinstated and nothing is owed"),
            "{detail}"
        );
        let (evidence, detail) = said(DisputeStatus::Lost);
        assert_eq!(evidence, "dispute:lost");
        assert!(detail.contains("went back to the customer"), "{detail}");
        let (evidence, detail) = said(DisputeStatus::Open);
        assert_eq!(evidence, "dispute:open");
        assert!(
            detail.contains("held back until the bank decides"),
            "{detail}"
        );
    }

    #[test]
    fn one_discrepancy_has_one_dedupe_key_whatever_the_order_of_the_pages() {
        let a = compare(
            ATTEMPT,
            Some(&attempt(Succeeded)),
            &[
                record("ch_own", L::Succeeded),
                record("ch_other", L::Succeeded),
            ],
        );
        let b = compare(
            ATTEMPT,
            Some(&attempt(Succeeded)),
            &[
                record("ch_other", L::Succeeded),
                record("ch_own", L::Succeeded),
            ],
        );
        assert_eq!(a.findings[0].dedupe_key(), b.findings[0].dedupe_key());
    }
}
