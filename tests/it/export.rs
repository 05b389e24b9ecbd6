//! CSV export of a search (issue 39, decision 146): `GET /api/attempts.csv` and the
//! console's download answer exactly the attempts the same filters list, quoted by the book,
//! and refuse whole a search that finds more than one export holds.

use reqwest::header::CONTENT_TYPE;
use reqwest::StatusCode;
use serde_json::json;
use uuid::Uuid;

use crate::support::api::AdminApi;
use crate::support::{Records, TestEnv};

/// The rows of a CSV answer, header first.
fn rows(body: &str) -> Vec<Vec<String>> {
    csv::ReaderBuilder::new()
        .has_headers(false)
        .from_reader(body.as_bytes())
        .records()
        .map(|r| r.unwrap().iter().map(str::to_owned).collect())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_csv_holds_what_the_same_search_lists_quoted_and_with_formulas_defused() {
    let env = TestEnv::new().await;
    let tricky = "two, \"quoted\"\nlines";
    let mut ids = Vec::new();
    for description in [Some(tricky), Some("=HYPERLINK(\"http://evil\")"), None] {
        ids.push(
            env.record_command(
                json!({"order_id": "ord_csv", "description": description}),
                None,
            )
            .await,
        );
    }
    env.record_command(json!({"order_id": "ord_other"}), None)
        .await;
    let api = AdminApi::start(&env.settings).await;

    let response = api
        .http()
        .get(api.url("/api/attempts.csv?order_id=ord_csv"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()[CONTENT_TYPE].to_str().unwrap(),
        "text/csv; charset=utf-8"
    );
    let body = response.text().await.unwrap();
    let table = rows(&body);
    assert_eq!(table[0], onecharge::operator::export::COLUMNS);
    let column = |name: &str| table[0].iter().position(|c| c == name).unwrap();

    let (_, listed) = api.get("/api/attempts?order_id=ord_csv", None).await;
    let listed: Vec<String> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["payment_attempt_id"].as_str().unwrap().to_owned())
        .collect();
    let exported: Vec<String> = table[1..]
        .iter()
        .map(|r| r[column("payment_attempt_id")].clone())
        .collect();
    assert_eq!(exported, listed, "the same attempts, in the same order");
    assert_eq!(exported.len(), 3);

    let by_id = |id: Uuid| {
        table[1..]
            .iter()
            .find(|r| r[column("payment_attempt_id")] == id.to_string())
            .unwrap()
            .clone()
    };
    assert_eq!(
        by_id(ids[0])[column("description")],
        tricky,
        "quoted, not split"
    );
    assert_eq!(
        by_id(ids[1])[column("description")],
        "'=HYPERLINK(\"http://evil\")",
        "a formula is defused"
    );
    assert_eq!(by_id(ids[2])[column("description")], "");
    assert_eq!(by_id(ids[2])[column("status")], "pending");
    assert_eq!(by_id(ids[2])[column("order_id")], "ord_csv");

    let (status, body) = api.get("/api/attempts.csv?stuck=1h", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _) = api.get("/api/attempts.csv?status=lost", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    api.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_finding_more_than_one_export_holds_is_refused_whole() {
    let env = TestEnv::new().await;
    let first = env
        .record_command(json!({"order_id": "ord_many"}), None)
        .await;
    // 10,000 copies of it under new ids: more than one export holds.
    env.copy_attempt(first, 10_000).await;
    let api = AdminApi::start(&env.settings).await;
    let (status, body) = api.get("/api/attempts.csv?order_id=ord_many", None).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["type"], "too_many");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("narrow"));

    // One fewer fits.
    env.delete_attempt(first).await;
    let body = api
        .http()
        .get(api.url("/api/attempts.csv?order_id=ord_many"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(rows(&body).len(), 10_001, "the header and 10,000 attempts");
    api.stop().await;
}
