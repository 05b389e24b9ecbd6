//! Signed webhooks from localstripe (a Stripe fake no one here wrote): it signs its
//! `payment_intent.*` events with the secret configured by `POST /_config/webhooks/{id}`,
//! exactly as Stripe documents, and its failing SEPA debit goes `processing` → failed half a
//! second after the confirm. Without a webhook the reconciler would read the failure only at
//! its next scheduled lookup (two minutes here); the webhook wakes it at once.

use std::time::{Duration, Instant};

use onecharge::app::{Application, Role};
use secrecy::SecretString;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::support::localstripe::{Localstripe, Shim};
use crate::support::{command, Records, TestEnv};

const SECRET: &str = "whsec_localstripe_test";

#[tokio::test]
async fn localstripes_signed_webhook_wakes_a_processing_debit_far_sooner_than_the_schedule() {
    let Some(localstripe) = Localstripe::start().await else {
        return;
    };
    let shim = Shim::start(&localstripe).await;
    let env = TestEnv::with_settings(|s| {
        shim.configure(s);
        s.reconciler.schedule = vec![Duration::from_secs(120); 3];
        s.webhook_addr = Some("127.0.0.1:0".parse().unwrap());
        s.stripe_webhook_secrets = Some(SecretString::from(SECRET));
    })
    .await;
    let app = Application::build(env.settings.clone(), &Role::ALL)
        .await
        .expect("the service builds");
    let webhook = app.webhook_addr().expect("the webhook listener is bound");
    // localstripe answers the configuration with an empty body.
    let configured = reqwest::Client::new()
        .post(format!("{}/_config/webhooks/onecharge", localstripe.url))
        .form(&[
            ("url", format!("http://{webhook}/webhooks/stripe")),
            ("secret", SECRET.to_owned()),
        ])
        .send()
        .await
        .unwrap();
    assert!(configured.status().is_success(), "{}", configured.status());
    let customer = localstripe.create_customer("Ada Lovelace").await;
    let debit = localstripe
        .create_sepa_debit("DE62370400440532013001")
        .await;
    let stop = CancellationToken::new();
    let running = tokio::spawn(app.run(stop.clone()));
    let attempt = Uuid::new_v4();
    let started = Instant::now();
    env.publish(
        "ls-webhook-1",
        &command(
            attempt,
            json!({"payment_method": debit, "customer_id": customer}),
        ),
    )
    .await;

    let status = loop {
        let status = env.find_attempt(attempt).await.map(|row| row.status);
        if matches!(
            status.as_deref(),
            Some("declined" | "succeeded" | "needs_review")
        ) {
            break status.unwrap();
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "not settled within 60 s (the schedule would take 120 s): {status:?}; {}",
            localstripe.output()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    assert_eq!(status, "declined");
    let path = env.path(attempt).await;
    assert!(
        path.contains(&"unknown".to_owned()),
        "went through processing: {path:?}"
    );
    let events = env.webhook_events().await;
    let woke = events
        .iter()
        .filter(|e| {
            e.payment_attempt_id == Some(attempt) && e.event_type == "payment_intent.payment_failed"
        })
        .count();
    assert_eq!(
        woke, 1,
        "localstripe's signed event was accepted and recorded"
    );
    stop.cancel();
    running.await.unwrap().unwrap();
}
