//! A person's cancel of a pending attempt that must not be charged (issue 39, decision
//! 144): only an attempt no executor has claimed, decided by the database against the
//! executor's claim; the cancelled attempt is `expired` with one event and one audit row.

use std::collections::HashSet;

use mock_gateway::payment_methods as pm;
use onecharge::domain::Actor;
use onecharge::domain::{AttemptStatus, PaymentAttemptId};
use onecharge::operator::cancel::cancel;
use onecharge::operator::resolve::ResolveError;
use onecharge::operator::Via;

use crate::support::{run_leaving_one_in, Harness, Records};

async fn audit_rows(h: &Harness, id: PaymentAttemptId) -> Vec<(String, String, String)> {
    h.audit_entries_about(id)
        .await
        .into_iter()
        .map(|e| (e.actor, e.action, e.reason.unwrap_or_default()))
        .collect()
}

#[tokio::test]
async fn a_cancelled_pending_attempt_expires_with_its_event_and_is_never_charged() {
    let h = Harness::new().await;
    let id = h.seed(pm::CARD_VISA).await.payment_attempt_id;

    let cancelled = cancel(
        &h.store,
        None,
        id,
        " customer asked ",
        &Actor::operator("ana"),
        Via::Cli,
    )
    .await
    .unwrap();
    assert_eq!(cancelled.status, AttemptStatus::Expired);
    assert_eq!(cancelled.actor.to_string(), "operator:ana");

    let report = h.executor().run_once().await.unwrap();
    assert_eq!(report.claimed(), 0, "a cancelled attempt is not claimed");
    assert!(h.gateway.ledger().is_empty());

    let row = h.attempt(id).await;
    assert_eq!(row.status, "expired");
    assert_eq!(row.tries, 0);
    assert!(row.first_dispatched_at.is_none());
    assert_eq!(
        h.transitions(id).await.last().unwrap(),
        &(
            Some("pending".to_owned()),
            "expired".to_owned(),
            "operator_cancelled".to_owned()
        )
    );
    let (status, payload, _) = h.only_event(id).await;
    assert_eq!(status, "expired");
    assert_eq!(
        payload["event_id"].as_str().unwrap(),
        cancelled.event_id.to_string()
    );
    let reason = payload["reason"].as_str().unwrap();
    assert!(
        reason.contains("operator:ana") && reason.contains("customer asked"),
        "{reason}"
    );
    assert_eq!(
        audit_rows(&h, id).await,
        vec![(
            "operator:ana".to_owned(),
            "cancel".to_owned(),
            "customer asked".to_owned()
        )]
    );
}

#[tokio::test]
async fn a_cancel_is_refused_with_why_once_an_attempt_was_claimed_sent_or_settled_and_changes_nothing(
) {
    let h = Harness::new().await;
    let charged = h.seed(pm::CARD_VISA).await.payment_attempt_id;
    run_leaving_one_in(&h.executor(), AttemptStatus::Succeeded).await;
    let err = cancel(
        &h.store,
        None,
        charged,
        "too late",
        &Actor::operator("ana"),
        Via::Api,
    )
    .await
    .unwrap_err();
    let ResolveError::Refused(why) = err else {
        panic!("{err:?}")
    };
    assert!(why.contains("succeeded") && why.contains("final"), "{why}");

    // Pending again after a send (a retry is due): the gateway has seen its key.
    let retried = h.seed(pm::CARD_VISA).await.payment_attempt_id;
    h.set_attempt(
        retried,
        "first_dispatched_at = now() - interval '1 minute', tries = 1",
    )
    .await;
    let err = cancel(
        &h.store,
        None,
        retried,
        "stop it",
        &Actor::operator("ana"),
        Via::Api,
    )
    .await
    .unwrap_err();
    let ResolveError::Refused(why) = err else {
        panic!("{err:?}")
    };
    assert!(why.contains("was sent to the gateway"), "{why}");
    assert_eq!(h.attempt(retried).await.status, "pending");

    let missing = PaymentAttemptId::from(uuid::Uuid::new_v4());
    assert!(matches!(
        cancel(
            &h.store,
            None,
            missing,
            "why",
            &Actor::operator("ana"),
            Via::Api
        )
        .await,
        Err(ResolveError::NotFound(_))
    ));
    assert!(matches!(
        cancel(
            &h.store,
            None,
            retried,
            "  ",
            &Actor::operator("ana"),
            Via::Api
        )
        .await,
        Err(ResolveError::Invalid(_))
    ));

    for id in [charged, retried] {
        assert!(
            audit_rows(&h, id).await.is_empty(),
            "a refusal is not audited as done"
        );
        assert!(h.events(id).await.iter().all(|(s, _, _)| s != "expired"));
    }
}

/// The claim holds the row's lock while it moves the attempt to `in_flight`: a cancel
/// that arrives meanwhile waits for it, then finds the attempt claimed and changes nothing.
#[tokio::test]
async fn a_cancel_waiting_on_a_claim_in_progress_loses_to_it_and_says_so() {
    let h = Harness::new().await;
    let id = h.seed(pm::CARD_VISA).await.payment_attempt_id;
    let mut claim = h.store.pool().begin().await.unwrap();
    sqlx::query("SELECT 1 FROM payment_attempts WHERE payment_attempt_id = $1 FOR UPDATE")
        .bind(id)
        .execute(&mut *claim)
        .await
        .unwrap();
    let store = h.store.clone();
    let cancelling = tokio::spawn(async move {
        cancel(
            &store,
            None,
            id,
            "stop",
            &Actor::operator("ana"),
            Via::Console,
        )
        .await
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        !cancelling.is_finished(),
        "the cancel waits for the claim's lock"
    );
    sqlx::query(
        "UPDATE payment_attempts SET status = 'in_flight', lease_owner = 'test',
                lease_token = lease_token + 1, lease_expires_at = now() + interval '1 minute',
                tries = 1, dispatched_at = now(), first_dispatched_at = now()
         WHERE payment_attempt_id = $1",
    )
    .bind(id)
    .execute(&mut *claim)
    .await
    .unwrap();
    claim.commit().await.unwrap();
    let err = cancelling.await.unwrap().unwrap_err();
    let ResolveError::Refused(why) = err else {
        panic!("{err:?}")
    };
    assert!(
        why.contains("in_flight") && why.contains("claimed"),
        "{why}"
    );
    assert_eq!(h.attempt(id).await.status, "in_flight");
    assert!(h.events(id).await.is_empty());
}

/// Cancels and the executor's claims race over many attempts at once: every attempt is
/// either cancelled (never charged, one `expired` event) or claimed and charged once (its
/// cancel refused), never both and never neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_against_claim_each_attempt_is_cancelled_or_charged_exactly_once() {
    let h = Harness::new().await;
    let ids: Vec<PaymentAttemptId> = h
        .seed_many(&[pm::CARD_VISA; 40])
        .await
        .into_iter()
        .map(|c| c.payment_attempt_id)
        .collect();
    let executor = h.executor();
    let charging = tokio::spawn(async move {
        for _ in 0..20 {
            executor.run_once().await.unwrap();
        }
    });
    let mut cancels = Vec::new();
    for id in ids.iter().copied() {
        let store = h.store.clone();
        cancels.push(tokio::spawn(async move {
            (
                id,
                cancel(&store, None, id, "race", &Actor::operator("ana"), Via::Api).await,
            )
        }));
    }
    let mut cancelled = HashSet::new();
    for task in cancels {
        let (id, result) = task.await.unwrap();
        match result {
            Ok(_) => {
                cancelled.insert(id);
            }
            Err(ResolveError::Refused(_)) => {}
            Err(other) => panic!("{id}: {other:?}"),
        }
    }
    charging.await.unwrap();
    // Whatever the race left pending is charged now.
    while h.executor().run_once().await.unwrap().claimed() > 0 {}

    let charged: HashSet<String> = h
        .gateway
        .ledger()
        .into_iter()
        .map(|c| c.reference)
        .collect();
    for id in &ids {
        let row = h.attempt(*id).await;
        let events = h.events(*id).await;
        assert_eq!(events.len(), 1, "{id}: one final event");
        if cancelled.contains(id) {
            assert_eq!(row.status, "expired", "{id}");
            assert_eq!(events[0].0, "expired");
            assert!(
                !charged.contains(&id.to_string()),
                "{id} was cancelled and charged"
            );
        } else {
            assert_eq!(row.status, "succeeded", "{id}");
            assert!(charged.contains(&id.to_string()), "{id}");
        }
    }
    assert_eq!(charged.len() + cancelled.len(), ids.len());
}
