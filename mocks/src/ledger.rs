//! The ledger: every charge the gateway committed, whichever dialect made it, in commit
//! order (what tests check "charged at most once" against), indexed by `(created_at, id)`
//! for the §3 list (`crate::onecharge::list`).
//!
//! The index is kept under the same lock as the charges and changed by every method that
//! adds a charge or could move one, so a list page is a range query: its cost is
//! `O(log n + limit)` wherever it falls in the listing, where a scan of the whole ledger per
//! page made a sweep of 200,000 charges quadratic (786 s).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};
use time::OffsetDateTime;

use crate::charge::Charge;
use crate::paging::{self, Order, Page};

/// Every charge the gateway committed, in commit order, with its list index.
#[derive(Default)]
pub(crate) struct Ledger {
    inner: Mutex<Charges>,
}

impl Ledger {
    /// Appends a charge made outside any key's commit (a Stripe PaymentIntent that
    /// finishes processing later), or under a key's lock (`crate::keys`).
    pub(crate) fn record(&self, charge: Charge) {
        self.inner.lock().push(charge);
    }

    /// Appends many charges under one lock: a gateway that already holds many charges.
    pub(crate) fn record_all(&self, charges: impl IntoIterator<Item = Charge>) {
        let mut inner = self.inner.lock();
        for charge in charges {
            inner.push(charge);
        }
    }

    /// A copy of every charge, in commit order.
    pub(crate) fn charges(&self) -> Vec<Charge> {
        self.inner.lock().in_commit_order.clone()
    }

    pub(crate) fn len(&self) -> usize {
        self.inner.lock().in_commit_order.len()
    }

    /// The charges and their index, locked: for reading a page, or amending a charge.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Charges> {
        self.inner.lock()
    }
}

/// The key of the list index: a charge's `created_at` and `id`, then its place in commit
/// order (two charges may share an id: one recorded by a benchmark, say; each is listed).
type ListKey = (OffsetDateTime, Arc<str>, usize);

/// The ledger's contents: the charges in commit order and the indexes over them. Only its
/// own methods change it, so the indexes cannot fall out of step with the charges.
#[derive(Default)]
pub(crate) struct Charges {
    in_commit_order: Vec<Charge>,
    /// Every charge, oldest first by `(created_at, id)`: the §3 list's order.
    by_created: BTreeSet<ListKey>,
    /// The place of the first charge committed with each id: a list's `starting_after`
    /// names it, and `POST /__charges/{id}` changes it.
    first_by_id: HashMap<Arc<str>, usize>,
    /// Where the dispute of a disputed charge stands (`inquiry`, `open`, `won`, `lost`), by charge id:
    /// the §3 list shows the charge `disputed` with it (`POST /__charges/{id}`).
    disputes: HashMap<String, &'static str>,
}

impl Charges {
    fn push(&mut self, charge: Charge) {
        let at = self.in_commit_order.len();
        let id: Arc<str> = Arc::from(charge.id.as_str());
        self.first_by_id.entry(Arc::clone(&id)).or_insert(at);
        self.by_created.insert((charge.created_at, id, at));
        self.in_commit_order.push(charge);
    }

    /// The first charge committed with `id`.
    pub(crate) fn first_with_id(&self, id: &str) -> Option<&Charge> {
        let &at = self.first_by_id.get(id)?;
        Some(&self.in_commit_order[at])
    }

    /// A page of the charges created in `[from, to)` and after `after` (a `(created_at,
    /// id)`), oldest first by `(created_at, id)`: a range of the index
    /// ([`crate::paging::page`]).
    pub(crate) fn page(
        &self,
        from: OffsetDateTime,
        to: OffsetDateTime,
        after: Option<(OffsetDateTime, &str)>,
        limit: usize,
    ) -> Page<&Charge> {
        let key = |at: OffsetDateTime, id: &str, place: usize| (at, Arc::from(id), place);
        // Every charge of the cursor's (created_at, id) sorts before it, whatever its place.
        let cursor = after.map(|(created_at, id)| key(created_at, id, usize::MAX));
        paging::page(
            &self.by_created,
            key(from, "", 0),
            key(to, "", 0),
            cursor,
            Order::Ascending,
            limit,
            |(_, _, at)| &self.in_commit_order[*at],
        )
    }

    /// Disputes charge `id` (or moves its dispute) to `status`: `inquiry`, `open`, `won` or `lost`.
    /// `false` when there is no such charge.
    pub(crate) fn dispute(&mut self, id: &str, status: &'static str) -> bool {
        if !self.first_by_id.contains_key(id) {
            return false;
        }
        self.disputes.insert(id.to_owned(), status);
        true
    }

    /// Where charge `id`'s dispute stands, when it is disputed.
    pub(crate) fn dispute_of(&self, id: &str) -> Option<&'static str> {
        self.disputes.get(id).copied()
    }

    /// Changes the first charge committed with `id` (as someone editing it at the gateway),
    /// keeping the indexes true if the change moves it; `None` when there is no such charge.
    pub(crate) fn amend(&mut self, id: &str, change: impl FnOnce(&mut Charge)) -> Option<&Charge> {
        let at = *self.first_by_id.get(id)?;
        let charge = &mut self.in_commit_order[at];
        let (created_at, old_id) = (charge.created_at, charge.id.clone());
        change(charge);
        let (new_created_at, new_id) = (charge.created_at, charge.id.clone());
        if (new_created_at, new_id.as_str()) != (created_at, old_id.as_str()) {
            self.by_created
                .remove(&(created_at, Arc::from(old_id.as_str()), at));
            self.by_created
                .insert((new_created_at, Arc::from(new_id.as_str()), at));
        }
        if new_id != old_id {
            // The old id's first charge is now the next one committed with it, if any.
            self.first_by_id.remove(old_id.as_str());
            if let Some(next) = self.in_commit_order.iter().position(|c| c.id == old_id) {
                self.first_by_id.insert(Arc::from(old_id.as_str()), next);
            }
            let first = self
                .first_by_id
                .entry(Arc::from(new_id.as_str()))
                .or_insert(at);
            *first = (*first).min(at);
        }
        Some(&self.in_commit_order[at])
    }
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    fn charge(id: &str, second: i64) -> Charge {
        Charge::sample(
            id,
            datetime!(2026-12-01 00:00 UTC) + time::Duration::seconds(second),
        )
    }

    fn listed(charges: &Charges) -> Vec<&str> {
        let (from, to) = (
            datetime!(2026-11-30 00:00 UTC),
            datetime!(2026-12-02 00:00 UTC),
        );
        let page = charges.page(from, to, None, 100);
        page.data.into_iter().map(|c| c.id.as_str()).collect()
    }

    #[test]
    fn a_charge_amended_to_another_time_or_id_is_listed_where_it_now_belongs() {
        let ledger = Ledger::default();
        ledger.record_all([charge("ch_a", 1), charge("ch_b", 2), charge("ch_c", 3)]);
        let mut charges = ledger.lock();

        charges.amend("ch_a", |c| c.created_at += time::Duration::seconds(9));
        assert_eq!(listed(&charges), ["ch_b", "ch_c", "ch_a"]);

        charges.amend("ch_c", |c| c.id = "ch_0".into());
        assert_eq!(listed(&charges), ["ch_b", "ch_0", "ch_a"]);
        assert!(charges.first_with_id("ch_c").is_none());
        assert_eq!(
            charges.first_with_id("ch_0").unwrap().created_at,
            charge("ch_0", 3).created_at
        );
        assert!(charges.amend("ch_c", |_| {}).is_none());
    }
}
