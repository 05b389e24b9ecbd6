//! Idempotency keys, and how a commit writes to the ledger (`crate::ledger`).
//!
//! Claiming a key and committing its outcome happen under one mutex, and a commit that
//! charged appends to the ledger while that mutex is held, so a key can charge at most once
//! per retention window however many requests race for it. The store is generic over what
//! identifies "the same request" (`P`) and what is stored for replay (`R`), so both dialects
//! share it: onecharge's stores the charge, Stripe's the saved response. The locks are held
//! only for map operations, never across an `.await`.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::charge::Charge;
use crate::clock::MockInstant;
use crate::ledger::Ledger;

/// What a request may do with its key.
pub(crate) enum Claim<R> {
    /// The request owns the key until it commits or releases it. `first_request` is true
    /// when no earlier request used this key (within retention): deterministic fault
    /// triggers fire only then.
    Charge {
        generation: u64,
        first_request: bool,
    },
    /// Same parameters as the stored outcome: answer with it.
    Replay(R),
    /// Same parameters as a request still running.
    InProgress,
    /// Different parameters from the stored or running request.
    Reused,
}

pub(crate) struct Keys<P, R> {
    retention: Duration,
    ledger: Arc<Ledger>,
    inner: Mutex<KeysInner<P, R>>,
}

struct KeysInner<P, R> {
    entries: HashMap<String, Entry<P, R>>,
    /// Keys in first-seen order, which is also expiry order because the clock is monotonic
    /// and retention is fixed: purging pops from the front only.
    by_first_seen: VecDeque<(MockInstant, u64, String)>,
    next_generation: u64,
    in_progress: usize,
}

struct Entry<P, R> {
    /// Tells this life of the key from an earlier, expired one with the same name.
    generation: u64,
    first_seen: MockInstant,
    state: KeyState<P, R>,
}

enum KeyState<P, R> {
    /// Seen, but its request failed before executing (error_before, 429, injected 400):
    /// nothing stored, the next request executes.
    Released,
    InProgress(P),
    Completed(P, R),
}

impl<P: Clone + PartialEq, R: Clone> Keys<P, R> {
    pub(crate) fn new(retention: Duration, ledger: Arc<Ledger>) -> Self {
        Keys {
            retention,
            ledger,
            inner: Mutex::new(KeysInner {
                entries: HashMap::new(),
                by_first_seen: VecDeque::new(),
                next_generation: 0,
                in_progress: 0,
            }),
        }
    }

    pub(crate) fn claim(&self, key: &str, params: &P, now: MockInstant) -> Claim<R> {
        let mut inner = self.inner.lock();
        inner.purge_expired(self.retention, now);
        inner.forget_if_expired(key, self.retention, now);
        let reclaimed = match inner.entries.get_mut(key) {
            None => None,
            Some(entry) => match &entry.state {
                KeyState::InProgress(running) if running == params => return Claim::InProgress,
                KeyState::Completed(stored, outcome) if stored == params => {
                    return Claim::Replay(outcome.clone())
                }
                KeyState::InProgress(_) | KeyState::Completed(..) => return Claim::Reused,
                KeyState::Released => {
                    // Parameters are not bound by a request that executed nothing.
                    entry.state = KeyState::InProgress(params.clone());
                    Some(entry.generation)
                }
            },
        };
        inner.in_progress += 1;
        if let Some(generation) = reclaimed {
            return Claim::Charge {
                generation,
                first_request: false,
            };
        }
        let generation = inner.next_generation;
        inner.next_generation += 1;
        inner.entries.insert(
            key.to_owned(),
            Entry {
                generation,
                first_seen: now,
                state: KeyState::InProgress(params.clone()),
            },
        );
        inner
            .by_first_seen
            .push_back((now, generation, key.to_owned()));
        Claim::Charge {
            generation,
            first_request: true,
        }
    }

    /// Stores the outcome under the key and, when the request charged, appends the charge
    /// to the ledger, in one step.
    pub(crate) fn commit(&self, key: &str, generation: u64, outcome: R, charged: Option<Charge>) {
        let mut inner = self.inner.lock();
        let inner = &mut *inner;
        let Some(entry) = inner.entries.get_mut(key) else {
            return;
        };
        if entry.generation != generation {
            return;
        }
        let state = std::mem::replace(&mut entry.state, KeyState::Released);
        let KeyState::InProgress(params) = state else {
            entry.state = state;
            return;
        };
        entry.state = KeyState::Completed(params, outcome);
        if let Some(charge) = charged {
            self.ledger.record(charge);
        }
        inner.in_progress -= 1;
    }

    /// Frees the key after a request that executed nothing, so that a retry can.
    pub(crate) fn release(&self, key: &str, generation: u64) {
        let mut inner = self.inner.lock();
        let Some(entry) = inner.entries.get_mut(key) else {
            return;
        };
        if entry.generation == generation && matches!(entry.state, KeyState::InProgress(_)) {
            entry.state = KeyState::Released;
            inner.in_progress -= 1;
        }
    }

    /// The outcome recorded under a live key: none when it executed nothing, is still
    /// running, or was forgotten.
    pub(crate) fn lookup(&self, key: &str, now: MockInstant) -> Option<R> {
        let mut inner = self.inner.lock();
        inner.forget_if_expired(key, self.retention, now);
        match inner.entries.get(key) {
            Some(Entry {
                state: KeyState::Completed(_, outcome),
                ..
            }) => Some(outcome.clone()),
            _ => None,
        }
    }

    pub(crate) fn purge_expired(&self, now: MockInstant) {
        self.inner.lock().purge_expired(self.retention, now);
    }

    pub(crate) fn in_progress(&self) -> usize {
        self.inner.lock().in_progress
    }
}

impl<P, R> KeysInner<P, R> {
    fn forget_if_expired(&mut self, key: &str, retention: Duration, now: MockInstant) {
        if self
            .entries
            .get(key)
            .is_some_and(|entry| entry.expired(retention, now))
        {
            self.entries.remove(key);
        }
    }

    fn purge_expired(&mut self, retention: Duration, now: MockInstant) {
        while let Some((first_seen, _, _)) = self.by_first_seen.front() {
            if first_seen.after(retention) > now {
                break;
            }
            let (_, generation, key) = self.by_first_seen.pop_front().expect("front exists");
            // A running request keeps its key until it finishes; the lazy check in
            // `forget_if_expired` forgets it on the next use after that.
            if self.entries.get(&key).is_some_and(|entry| {
                entry.generation == generation && entry.expired(retention, now)
            }) {
                self.entries.remove(&key);
            }
        }
    }
}

impl<P, R> Entry<P, R> {
    fn expired(&self, retention: Duration, now: MockInstant) -> bool {
        !matches!(self.state, KeyState::InProgress(_)) && self.first_seen.after(retention) <= now
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::charge::ChargeParams;

    const RETENTION: Duration = Duration::from_secs(100);

    fn at(secs: u64) -> MockInstant {
        MockInstant::from_start(Duration::from_secs(secs))
    }

    fn params(amount_minor: i64) -> ChargeParams {
        ChargeParams {
            amount_minor,
            currency: "EUR".into(),
            customer_id: "cus_1".into(),
            payment_method: "pm_card_visa".into(),
            reference: "ref".into(),
            description: None,
            metadata: Default::default(),
        }
    }

    fn charge(id: &str) -> Charge {
        Charge::sample(id, time::OffsetDateTime::UNIX_EPOCH)
    }

    type ChargeKeys = Keys<ChargeParams, Charge>;

    fn keys() -> (ChargeKeys, Arc<Ledger>) {
        let ledger = Arc::new(Ledger::default());
        (Keys::new(RETENTION, Arc::clone(&ledger)), ledger)
    }

    fn commit(keys: &ChargeKeys, generation: u64, id: &str) {
        keys.commit("k", generation, charge(id), Some(charge(id)));
    }

    fn claim_new(keys: &ChargeKeys, now: MockInstant) -> u64 {
        match keys.claim("k", &params(1), now) {
            Claim::Charge {
                generation,
                first_request: true,
            } => generation,
            _ => panic!("expected a first claim"),
        }
    }

    #[test]
    fn a_claimed_key_answers_in_progress_then_replays_and_rejects_other_parameters() {
        let (keys, ledger) = keys();
        let generation = claim_new(&keys, at(0));
        assert!(matches!(
            keys.claim("k", &params(1), at(1)),
            Claim::InProgress
        ));
        assert!(matches!(keys.claim("k", &params(2), at(1)), Claim::Reused));

        commit(&keys, generation, "ch_1");

        assert!(matches!(keys.claim("k", &params(1), at(2)), Claim::Replay(c) if c.id == "ch_1"));
        assert!(matches!(keys.claim("k", &params(2), at(2)), Claim::Reused));
        assert_eq!(ledger.len(), 1);
        assert_eq!(keys.in_progress(), 0);
    }

    #[test]
    fn a_released_key_charges_again_without_being_a_first_request() {
        let (keys, _ledger) = keys();
        let generation = claim_new(&keys, at(0));
        keys.release("k", generation);

        assert!(keys.lookup("k", at(1)).is_none());
        assert!(matches!(
            keys.claim("k", &params(2), at(1)),
            Claim::Charge {
                first_request: false,
                ..
            }
        ));
    }

    #[test]
    fn a_running_request_keeps_its_key_past_retention_and_it_expires_after_commit() {
        let (keys, _ledger) = keys();
        let generation = claim_new(&keys, at(0));
        keys.purge_expired(at(500));
        assert!(matches!(
            keys.claim("k", &params(1), at(500)),
            Claim::InProgress
        ));

        commit(&keys, generation, "ch_1");

        assert!(keys.lookup("k", at(501)).is_none());
        claim_new(&keys, at(501));
    }

    #[test]
    fn a_key_charged_again_after_expiry_gets_a_retention_window_of_its_own() {
        let (keys, ledger) = keys();
        let first = claim_new(&keys, at(0));
        commit(&keys, first, "ch_1");
        assert!(keys.lookup("k", at(100)).is_none());
        let second = claim_new(&keys, at(150));
        commit(&keys, second, "ch_2");

        keys.purge_expired(at(200));

        assert_eq!(keys.lookup("k", at(200)).unwrap().id, "ch_2");
        assert!(keys.lookup("k", at(250)).is_none());
        assert_eq!(ledger.len(), 2);
    }
}
