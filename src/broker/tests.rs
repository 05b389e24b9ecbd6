use super::*;

#[test]
fn a_nats_urls_credentials_are_read_decoded_and_must_agree_across_servers() {
    let user = |u: &str, p: &str| Some(UrlCredentials::UserAndPassword(u.into(), p.into()));
    for (servers, expected) in [
        (vec!["nats://127.0.0.1:4222"], None),
        (vec!["nats://app:s3cr%40t@n1:4222"], user("app", "s3cr@t")),
        (
            vec!["nats://tok3n@n1:4222"],
            Some(UrlCredentials::Token("tok3n".into())),
        ),
        (
            vec![
                "nats://n1:4222",
                "nats://app:pw@n2:4222",
                "nats://app:pw@n3:4222",
            ],
            user("app", "pw"),
        ),
    ] {
        assert_eq!(
            url_credentials(&servers, "nats_url").unwrap(),
            expected,
            "{servers:?}"
        );
    }
    let refused = url_credentials(
        &["nats://app:pw@n1:4222", "nats://app:other@n2:4222"],
        "nats_url",
    )
    .unwrap_err();
    assert!(refused.0.contains("different credentials"), "{}", refused.0);
    assert!(!refused.0.contains("other"), "{}", refused.0);
}

#[test]
fn without_a_namespace_the_contract_names_are_used() {
    let n = Names::new("");
    assert_eq!(n.commands_stream(), "PAYMENTS_COMMANDS");
    assert_eq!(n.charge_subject(), "payments.commands.charge-payment.v1");
    assert_eq!(n.dlq_subject(), "payments.dlq.charge-payment.v1");
    let t = Names::new("demo-1");
    assert_eq!(t.commands_stream(), "DEMO_1_PAYMENTS_COMMANDS");
    assert_eq!(
        t.subject("payments.events.payment-succeeded.v1"),
        "demo-1.payments.events.payment-succeeded.v1"
    );
}

#[test]
fn only_publish_errors_that_may_pass_are_retried_never_a_refusal() {
    let api = |json: &str| {
        let error: jetstream::Error = serde_json::from_str(json).unwrap();
        PublishError::with_source(PublishErrorKind::Other, error)
    };
    for passes in [
        PublishError::new(PublishErrorKind::TimedOut),
        PublishError::new(PublishErrorKind::BrokenPipe),
        PublishError::new(PublishErrorKind::StreamNotFound),
        api(
            r#"{"code":503,"err_code":10008,"description":"JetStream system temporarily unavailable"}"#,
        ),
    ] {
        assert!(publish_may_pass(&passes), "{passes}");
    }
    for refusal in [
        PublishError::new(PublishErrorKind::MaxPayloadExceeded),
        PublishError::new(PublishErrorKind::WrongLastMessageId),
        api(
            r#"{"code":400,"err_code":10054,"description":"message size exceeds maximum allowed"}"#,
        ),
    ] {
        assert!(!publish_may_pass(&refusal), "{refusal}");
    }
}

#[test]
fn start_up_questions_are_asked_again_on_silence_and_503_never_after_an_answer() {
    let api = |json: &str| serde_json::from_str::<jetstream::Error>(json).unwrap();
    let unavailable = api(
        r#"{"code":503,"err_code":10008,"description":"JetStream system temporarily unavailable"}"#,
    );
    let stream_missing = api(r#"{"code":404,"err_code":10059,"description":"stream not found"}"#);
    assert!(stream_lookup_may_pass(&GetStreamError::new(
        GetStreamErrorKind::Request
    )));
    assert!(stream_lookup_may_pass(&GetStreamError::new(
        GetStreamErrorKind::JetStream(unavailable.clone())
    )));
    let missing = GetStreamError::new(GetStreamErrorKind::JetStream(stream_missing));
    assert!(!stream_lookup_may_pass(&missing));
    assert!(is_not_found(&missing));
    assert!(!is_not_found(&GetStreamError::new(
        GetStreamErrorKind::Request
    )));
    let name_in_use = api(
        r#"{"code":400,"err_code":10058,"description":"stream name already in use with a different configuration"}"#,
    );
    assert!(stream_create_may_pass(&CreateStreamError::new(
        CreateStreamErrorKind::TimedOut
    )));
    assert!(stream_create_may_pass(&CreateStreamError::new(
        CreateStreamErrorKind::JetStream(unavailable.clone())
    )));
    let in_use = CreateStreamError::new(CreateStreamErrorKind::JetStream(name_in_use));
    assert!(!stream_create_may_pass(&in_use));
    assert!(is_name_in_use(&in_use));
    for passes in [
        ConsumerInfoErrorKind::TimedOut,
        ConsumerInfoErrorKind::NoResponders,
        ConsumerInfoErrorKind::Offline,
        ConsumerInfoErrorKind::JetStream(unavailable.clone()),
    ] {
        assert!(consumer_info_may_pass(&ConsumerInfoError::new(passes)));
    }
    assert!(!consumer_info_may_pass(&ConsumerInfoError::new(
        ConsumerInfoErrorKind::NotFound
    )));
    assert!(consumer_write_may_pass(ConsumerErrorKind::TimedOut));
    assert!(consumer_write_may_pass(ConsumerErrorKind::JetStream(
        unavailable
    )));
    assert!(!consumer_write_may_pass(ConsumerErrorKind::InvalidName));
}

#[test]
fn stream_subjects_must_cover_what_onecharge_uses() {
    assert!(subject_covers("payments.>", "payments.commands.>"));
    assert!(subject_covers("payments.*.>", "payments.commands.>"));
    assert!(!subject_covers("payments.events.>", "payments.commands.>"));
    assert!(!subject_covers(
        "payments.commands.x",
        "payments.commands.>"
    ));
    let config = stream::Config {
        subjects: vec!["orders.>".into()],
        ..Default::default()
    };
    let err = check_stream_compatible("S", &config, "payments.commands.>")
        .unwrap_err()
        .to_string();
    assert!(err.contains("do not include"), "{err}");
}
