//! The refund ledger: every refund the gateway recorded, whichever dialect made it, in
//! creation order, indexed by id and by charge. What tests check "never refunded twice,
//! never over the charge" against, and the one place that decides both: a refund is
//! recorded only if the refunds of its charge that hold money (`pending`,
//! `requires_action`, `succeeded`) plus it stay within the charge's amount, checked and
//! written under one lock however many requests race; and no later move makes a refund
//! hold more than it held (`RefundStatus::can_become`).
//!
//! Its lock is taken last: callers may hold the charge ledger's or the PaymentIntents' lock
//! when they call it, and it never calls out.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use parking_lot::Mutex;
use serde::Serialize;

use crate::paging::Page;
use crate::refund::{Refund, RefundStatus, Settle, DECLINED};

/// Every refund recorded, with its indexes.
#[derive(Default)]
pub(crate) struct RefundLedger {
    inner: Mutex<Refunds>,
}

#[derive(Default)]
struct Refunds {
    in_creation_order: Vec<Entry>,
    /// The place of each refund in creation order.
    by_id: HashMap<String, usize>,
    /// The places of each charge's refunds, in creation order.
    by_charge: HashMap<String, Vec<usize>>,
    /// The places of the refunds that settle later, for `settle_waiting`.
    waiting: BTreeSet<usize>,
}

struct Entry {
    refund: Refund,
    /// Where it moves when it settles, until it does or a control moves it.
    settles_to: Option<Settle>,
}

/// A refund refused because it would take its charge's refunds over the charge's amount;
/// nothing was recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OverRefund {
    /// What is left to refund of the charge.
    pub(crate) left: i64,
}

/// A refund that moved: its status before, and the refund as it is now.
#[derive(Clone, Debug)]
pub(crate) struct Moved {
    pub(crate) from: RefundStatus,
    pub(crate) refund: Refund,
}

/// Why a refund did not move.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum MoveRefused {
    #[error("no refund {0}")]
    Unknown(String),
    #[error("refund {id} is {from}: it cannot become {to}", from = .from.as_str(), to = .to.as_str())]
    NotFrom {
        id: String,
        from: RefundStatus,
        to: RefundStatus,
    },
}

/// A `starting_after` that names no refund.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UnknownCursor;

/// How many refunds, and how much of them settled or still held, for one refund id, key
/// or charge (`GET /__ledger/refunds`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Tally {
    /// Refunds recorded, whatever became of them.
    pub(crate) refunds: u64,
    /// The amount of those `succeeded`: what went back to the customer.
    pub(crate) succeeded: i64,
    /// The amount of those `pending` or `requires_action`: held, not settled yet.
    pub(crate) pending: i64,
}

/// [`Tally`]s by onecharge refund id, by idempotency key and by charge.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Tallies {
    pub(crate) by_refund_id: BTreeMap<String, Tally>,
    pub(crate) by_idempotency_key: BTreeMap<String, Tally>,
    pub(crate) by_charge: BTreeMap<String, Tally>,
}

impl RefundLedger {
    /// What is left to refund of charge `charge_id` of `charge_amount`.
    pub(crate) fn left(&self, charge_id: &str, charge_amount: i64) -> i64 {
        charge_amount - self.inner.lock().held(charge_id)
    }

    /// Records `refund` if its charge's refunds that hold money, it included, stay within
    /// `charge_amount`; `settles_to` is where it moves later, if it does.
    pub(crate) fn record(
        &self,
        refund: Refund,
        settles_to: Option<Settle>,
        charge_amount: i64,
    ) -> Result<Refund, OverRefund> {
        let mut inner = self.inner.lock();
        let left = charge_amount - inner.held(&refund.charge_id);
        if refund.amount_minor > left {
            return Err(OverRefund { left });
        }
        let at = inner.in_creation_order.len();
        inner.by_id.insert(refund.id.clone(), at);
        inner
            .by_charge
            .entry(refund.charge_id.clone())
            .or_default()
            .push(at);
        if settles_to.is_some() {
            inner.waiting.insert(at);
        }
        inner.in_creation_order.push(Entry {
            refund: refund.clone(),
            settles_to,
        });
        Ok(refund)
    }

    /// The refund `id` as it stands now.
    pub(crate) fn get(&self, id: &str) -> Option<Refund> {
        let inner = self.inner.lock();
        let &at = inner.by_id.get(id)?;
        Some(inner.in_creation_order[at].refund.clone())
    }

    /// Every refund, in creation order.
    pub(crate) fn all(&self) -> Vec<Refund> {
        let inner = self.inner.lock();
        inner
            .in_creation_order
            .iter()
            .map(|entry| entry.refund.clone())
            .collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.inner.lock().in_creation_order.len()
    }

    /// The amount of charge `charge_id`'s refunds whose status `counted` accepts.
    pub(crate) fn sum(&self, charge_id: &str, counted: impl Fn(RefundStatus) -> bool) -> i64 {
        self.inner.lock().sum(charge_id, counted)
    }

    /// Moves refund `id` to `status` (a `failed` one with `failure_reason`, `declined` when
    /// none is given), as the gateway settling it; it then no longer settles by itself.
    pub(crate) fn move_to(
        &self,
        id: &str,
        status: RefundStatus,
        failure_reason: Option<String>,
    ) -> Result<Moved, MoveRefused> {
        let mut inner = self.inner.lock();
        let at = *inner
            .by_id
            .get(id)
            .ok_or_else(|| MoveRefused::Unknown(id.to_owned()))?;
        let from = inner.in_creation_order[at].refund.status;
        if !from.can_become(status) {
            return Err(MoveRefused::NotFrom {
                id: id.to_owned(),
                from,
                to: status,
            });
        }
        inner.waiting.remove(&at);
        let reason = failure_reason.unwrap_or_else(|| DECLINED.to_owned());
        Ok(inner.apply(at, status, reason))
    }

    /// Settles the refunds waiting to (refund `id`, or all of them): each moves where it
    /// was bound to. What moved, in creation order.
    pub(crate) fn settle_waiting(&self, id: Option<&str>) -> Vec<Moved> {
        let mut inner = self.inner.lock();
        let places: Vec<usize> = match id {
            Some(id) => inner
                .by_id
                .get(id)
                .filter(|at| inner.waiting.contains(at))
                .copied()
                .into_iter()
                .collect(),
            None => inner.waiting.iter().copied().collect(),
        };
        places
            .into_iter()
            .filter_map(|at| {
                inner.waiting.remove(&at);
                let settle = inner.in_creation_order[at].settles_to.take()?;
                let reason = settle.failure_reason.unwrap_or(DECLINED).to_owned();
                Some(inner.apply(at, settle.status, reason))
            })
            .collect()
    }

    /// A page of refunds, newest first: charge `charge_id`'s, or all; those created before
    /// refund `starting_after`, when given.
    pub(crate) fn page(
        &self,
        charge_id: Option<&str>,
        starting_after: Option<&str>,
        limit: usize,
    ) -> Result<Page<Refund>, UnknownCursor> {
        let inner = self.inner.lock();
        let before = match starting_after {
            Some(id) => *inner.by_id.get(id).ok_or(UnknownCursor)?,
            None => usize::MAX,
        };
        let newest_first: Box<dyn Iterator<Item = usize> + '_> = match charge_id {
            Some(charge_id) => {
                let places = inner
                    .by_charge
                    .get(charge_id)
                    .map_or(&[][..], Vec::as_slice);
                let end = places.partition_point(|&at| at < before);
                Box::new(places[..end].iter().rev().copied())
            }
            None => Box::new((0..before.min(inner.in_creation_order.len())).rev()),
        };
        let mut data: Vec<Refund> = newest_first
            .take(limit + 1)
            .map(|at| inner.in_creation_order[at].refund.clone())
            .collect();
        let has_more = data.len() > limit;
        data.truncate(limit);
        Ok(Page { data, has_more })
    }

    /// How many refunds, and how much settled or held, by refund id, key and charge.
    pub(crate) fn tallies(&self) -> Tallies {
        let inner = self.inner.lock();
        let mut tallies = Tallies::default();
        for Entry { refund, .. } in &inner.in_creation_order {
            let count = |tally: &mut Tally| {
                tally.refunds += 1;
                match refund.status {
                    RefundStatus::Succeeded => tally.succeeded += refund.amount_minor,
                    status if status.holds() => tally.pending += refund.amount_minor,
                    _ => {}
                }
            };
            if let Some(refund_id) = &refund.refund_id {
                count(tallies.by_refund_id.entry(refund_id.clone()).or_default());
            }
            if let Some(key) = &refund.idempotency_key {
                count(tallies.by_idempotency_key.entry(key.clone()).or_default());
            }
            count(
                tallies
                    .by_charge
                    .entry(refund.charge_id.clone())
                    .or_default(),
            );
        }
        tallies
    }
}

impl Refunds {
    fn sum(&self, charge_id: &str, counted: impl Fn(RefundStatus) -> bool) -> i64 {
        self.by_charge.get(charge_id).map_or(0, |places| {
            places
                .iter()
                .map(|&at| &self.in_creation_order[at].refund)
                .filter(|refund| counted(refund.status))
                .map(|refund| refund.amount_minor)
                .sum()
        })
    }

    /// What charge `charge_id`'s refunds hold: counted against its amount.
    fn held(&self, charge_id: &str) -> i64 {
        self.sum(charge_id, RefundStatus::holds)
    }

    fn apply(&mut self, at: usize, status: RefundStatus, failure_reason: String) -> Moved {
        let entry = &mut self.in_creation_order[at];
        entry.settles_to = None;
        let refund = &mut entry.refund;
        let from = refund.status;
        refund.status = status;
        refund.failure_reason = (status == RefundStatus::Failed).then_some(failure_reason);
        Moved {
            from,
            refund: refund.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use time::OffsetDateTime;

    use super::*;

    fn refund(id: &str, charge: &str, amount_minor: i64, status: RefundStatus) -> Refund {
        Refund {
            id: id.to_owned(),
            charge_id: charge.to_owned(),
            amount_minor,
            currency: "EUR".into(),
            status,
            refund_id: Some(format!("rf-{id}")),
            reference: None,
            idempotency_key: Some(format!("key-{id}")),
            reason: None,
            failure_reason: None,
            metadata: BTreeMap::new(),
            created_at: OffsetDateTime::UNIX_EPOCH,
        }
    }

    fn ids(page: &Page<Refund>) -> Vec<&str> {
        page.data.iter().map(|r| r.id.as_str()).collect()
    }

    #[test]
    fn pending_and_succeeded_refunds_hold_their_amount_and_failed_ones_do_not() {
        let ledger = RefundLedger::default();
        ledger
            .record(
                refund("re_1", "ch_1", 600, RefundStatus::Pending),
                None,
                1000,
            )
            .unwrap();
        ledger
            .record(
                refund("re_2", "ch_1", 400, RefundStatus::Failed),
                None,
                1000,
            )
            .unwrap();
        assert_eq!(ledger.left("ch_1", 1000), 400);

        let over = ledger.record(
            refund("re_3", "ch_1", 401, RefundStatus::Succeeded),
            None,
            1000,
        );
        assert_eq!(over, Err(OverRefund { left: 400 }));
        assert!(ledger.get("re_3").is_none(), "nothing recorded");

        ledger.move_to("re_1", RefundStatus::Failed, None).unwrap();
        assert_eq!(ledger.left("ch_1", 1000), 1000);
        assert_eq!(
            ledger.get("re_1").unwrap().failure_reason.as_deref(),
            Some(DECLINED)
        );
        assert_eq!(ledger.left("ch_2", 1000), 1000, "another charge's");
    }

    #[test]
    fn concurrent_refunds_of_one_charge_never_take_it_over_its_amount() {
        let ledger = Arc::new(RefundLedger::default());
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let ledger = Arc::clone(&ledger);
                std::thread::spawn(move || {
                    (0..50)
                        .filter(|n| {
                            let id = format!("re_{t}_{n}");
                            let new = refund(&id, "ch_1", 7, RefundStatus::Succeeded);
                            ledger.record(new, None, 1000).is_ok()
                        })
                        .count()
                })
            })
            .collect();
        let recorded: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();

        assert_eq!(recorded, 1000 / 7);
        assert_eq!(ledger.sum("ch_1", |s| s == RefundStatus::Succeeded), 994);
    }

    #[test]
    fn waiting_refunds_settle_once_where_they_were_bound_and_a_control_overrides_them() {
        let ledger = RefundLedger::default();
        let later = Settle {
            status: RefundStatus::Succeeded,
            failure_reason: None,
        };
        for id in ["re_1", "re_2", "re_3"] {
            let new = refund(id, "ch_1", 100, RefundStatus::Pending);
            ledger.record(new, Some(later), 1000).unwrap();
        }
        ledger
            .move_to(
                "re_2",
                RefundStatus::Failed,
                Some("lost_or_stolen_card".into()),
            )
            .unwrap();

        let one = ledger.settle_waiting(Some("re_1"));
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].from, RefundStatus::Pending);
        let rest = ledger.settle_waiting(None);
        let settled: Vec<&str> = rest.iter().map(|m| m.refund.id.as_str()).collect();
        assert_eq!(
            settled,
            ["re_3"],
            "re_1 settled already, re_2 was moved by hand"
        );
        assert!(ledger.settle_waiting(None).is_empty());
        assert_eq!(ledger.get("re_2").unwrap().status, RefundStatus::Failed);
        assert_eq!(
            ledger
                .move_to("re_2", RefundStatus::Succeeded, None)
                .unwrap_err(),
            MoveRefused::NotFrom {
                id: "re_2".into(),
                from: RefundStatus::Failed,
                to: RefundStatus::Succeeded
            }
        );
        assert!(matches!(
            ledger.move_to("re_9", RefundStatus::Failed, None),
            Err(MoveRefused::Unknown(_))
        ));
    }

    #[test]
    fn pages_run_newest_first_by_charge_or_all_from_the_cursor() {
        let ledger = RefundLedger::default();
        for (n, charge) in ["ch_a", "ch_b", "ch_a", "ch_a", "ch_b"].iter().enumerate() {
            let new = refund(&format!("re_{n}"), charge, 1, RefundStatus::Succeeded);
            ledger.record(new, None, 1000).unwrap();
        }

        let first = ledger.page(Some("ch_a"), None, 2).unwrap();
        assert_eq!((ids(&first), first.has_more), (vec!["re_3", "re_2"], true));
        let next = ledger.page(Some("ch_a"), Some("re_2"), 2).unwrap();
        assert_eq!((ids(&next), next.has_more), (vec!["re_0"], false));
        let all = ledger.page(None, Some("re_3"), 10).unwrap();
        assert_eq!(ids(&all), ["re_2", "re_1", "re_0"]);
        assert!(ledger
            .page(Some("ch_none"), None, 10)
            .unwrap()
            .data
            .is_empty());
        assert_eq!(
            ledger.page(None, Some("re_x"), 1).unwrap_err(),
            UnknownCursor
        );
    }

    #[test]
    fn tallies_count_refunds_by_refund_id_key_and_charge() {
        let ledger = RefundLedger::default();
        let mut first = refund("re_1", "ch_1", 300, RefundStatus::Succeeded);
        first.refund_id = Some("rf".into());
        let mut second = refund("re_2", "ch_1", 200, RefundStatus::Pending);
        second.refund_id = Some("rf".into());
        let mut outside = refund("re_3", "ch_1", 100, RefundStatus::Failed);
        (outside.refund_id, outside.idempotency_key) = (None, None);
        for new in [first, second, outside] {
            ledger.record(new, None, 1000).unwrap();
        }

        let tallies = ledger.tallies();
        let both = Tally {
            refunds: 2,
            succeeded: 300,
            pending: 200,
        };
        assert_eq!(tallies.by_refund_id["rf"], both);
        assert_eq!(tallies.by_idempotency_key.len(), 2);
        assert_eq!(tallies.by_charge["ch_1"], Tally { refunds: 3, ..both });
    }
}
