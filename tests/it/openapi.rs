//! The admin API's OpenAPI document (`GET /api/openapi.json`, committed as
//! `docs/openapi.json`) against the router, both ways: every `/api` route the source
//! declares is documented with its methods, and every documented operation is answered by
//! a handler (no 404 from the router, no 405).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::support::api::AdminApi;
use crate::support::TestEnv;
use reqwest::{Method, StatusCode};
use serde_json::Value;

/// Every (path, method) an `.route("/api…", …)` in `src/` declares, read from the source
/// (axum cannot list a router's routes): the path literal, then each `get(`/`post(`/… of
/// the method router up to the next route.
fn declared_api_routes() -> BTreeSet<(String, String)> {
    fn walk(dir: &Path, found: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, found);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    let mut sources = Vec::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut sources,
    );
    let mut routes = BTreeSet::new();
    for source in &sources {
        for piece in source.split(".route(").skip(1) {
            let piece = piece.trim_start();
            let Some(rest) = piece.strip_prefix("\"/api") else {
                continue;
            };
            let end = rest.find('"').unwrap();
            let path = format!("/api{}", &rest[..end]);
            let router = &rest[end..rest.find(';').unwrap_or(rest.len())];
            for method in ["get", "post", "put", "patch", "delete"] {
                let called = router.match_indices(&format!("{method}(")).any(|(at, _)| {
                    at == 0
                        || (!router.as_bytes()[at - 1].is_ascii_alphanumeric()
                            && router.as_bytes()[at - 1] != b'_')
                });
                if called {
                    routes.insert((path.clone(), method.to_owned()));
                }
            }
        }
    }
    routes
}

fn documented_operations(document: &Value) -> BTreeSet<(String, String)> {
    let mut operations = BTreeSet::new();
    for (path, item) in document["paths"].as_object().expect("paths") {
        for method in item.as_object().unwrap().keys() {
            if ["get", "post", "put", "patch", "delete"].contains(&method.as_str()) {
                operations.insert((path.clone(), method.clone()));
            }
        }
    }
    operations
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_api_route_is_documented_and_every_documented_operation_is_answered() {
    let env = TestEnv::new().await;
    let api = AdminApi::start(&env.settings).await;

    let (status, document) = api.get("/api/openapi.json", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(document["openapi"], "3.1.0");
    assert_eq!(
        document,
        onecharge::http::openapi::document(),
        "the served document is the generated one"
    );
    let documented = documented_operations(&document);

    let declared = declared_api_routes();
    assert!(
        declared.contains(&("/api/attempts/{id}/resolve".into(), "post".into())),
        "the source scan finds the routes: {declared:?}"
    );
    let undocumented: Vec<_> = declared.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "routes the router answers but the document does not describe: {undocumented:?}"
    );

    let id = uuid::Uuid::new_v4().to_string();
    for (path, method) in &documented {
        let url = api.url(&path.replace("{id}", &id));
        let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let response = api
            .http()
            .request(method.clone(), &url)
            .header("content-type", "application/json")
            .body("{}")
            .send()
            .await
            .unwrap();
        let status = response.status();
        let body = response.text().await.unwrap();
        // A handler's 404 says what is missing in the API's error JSON; the router's is empty.
        let answered_by_a_handler = status != StatusCode::METHOD_NOT_ALLOWED
            && (status != StatusCode::NOT_FOUND || body.contains(r#""type":"not_found""#));
        assert!(
            answered_by_a_handler,
            "{method} {path} is documented but answers {status}: {body}"
        );
    }
    // and a method the document does not list on a documented path is not answered
    let (status, _) = api.post("/api/stats", None, serde_json::json!({})).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    api.stop().await;
}

/// What a client generator needs of every operation (issue 39): a unique, descriptive
/// `operationId`, a typed schema for every successful JSON answer (never the empty schema
/// `serde_json::Value` gives), and `servers` to call; and the dead-letter operations the CLI
/// and the console have.
#[test]
fn every_operation_has_a_unique_operation_id_a_typed_answer_and_servers() {
    let document = onecharge::http::openapi::document();
    let servers = document["servers"].as_array().expect("servers");
    assert!(!servers.is_empty());
    assert!(servers.iter().all(|s| s["url"].is_string()));

    let mut ids: BTreeMap<String, (String, String)> = BTreeMap::new();
    let mut untyped = Vec::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let id = operation["operationId"]
                .as_str()
                .unwrap_or_else(|| panic!("{method} {path} has no operationId"));
            assert!(
                id.len() > 6
                    && id.chars().next().unwrap().is_ascii_lowercase()
                    && !id.contains('_'),
                "{method} {path}: operationId {id} is not a descriptive camelCase name"
            );
            if let Some(other) = ids.insert(id.to_owned(), (method.clone(), path.clone())) {
                panic!("operationId {id} names both {other:?} and {method} {path}");
            }
            for (code, response) in operation["responses"].as_object().unwrap() {
                if !code.starts_with('2') {
                    continue;
                }
                let schema = &response["content"]["application/json"]["schema"];
                let empty = |s: &Value| s.as_object().is_some_and(|o| o.is_empty());
                if empty(schema) || empty(&schema["items"]) {
                    untyped.push(format!("{method} {path} {code}"));
                }
            }
        }
    }
    assert!(
        untyped.is_empty(),
        "answers without a typed schema: {untyped:?}"
    );
    for (method, path) in [
        ("get", "/api/dlq"),
        ("get", "/api/dlq/{sequence}"),
        ("post", "/api/dlq/{sequence}/replay"),
    ] {
        assert!(
            ids.values().any(|(m, p)| m == method && p == path),
            "{method} {path} is not documented"
        );
    }
    // A named schema is defined where it is referenced.
    let text = document.to_string();
    for reference in text.split("\"#/components/schemas/").skip(1) {
        let name = &reference[..reference.find('"').unwrap()];
        assert!(
            document["components"]["schemas"][name].is_object(),
            "{name} is referenced but not defined"
        );
    }
}

/// Issue 54: a client generated from the document sends what the API understands. Every
/// query parameter says its type: a state as its enum (`status`, `state`, `class`, `kind`),
/// a time as `date-time`, an id as `uuid`, a page size with its bounds; the free-text ones
/// (an order id, a cursor, a duration) are named here. And every request body has a schema.
#[test]
fn every_query_parameter_and_request_body_is_typed() {
    let document = onecharge::http::openapi::document();
    let resolve = |schema: &Value| -> Value {
        match schema["$ref"].as_str() {
            Some(reference) => {
                let name = reference.rsplit('/').next().unwrap();
                document["components"]["schemas"][name].clone()
            }
            None => schema.clone(),
        }
    };
    let free_text = [
        "order_id",
        "customer_id",
        "gateway_charge_id",
        "idempotency_key",
        "actor",
        "before",
        "stuck",
    ];
    let mut untyped = Vec::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            for parameter in operation["parameters"].as_array().into_iter().flatten() {
                if parameter["in"] != "query" {
                    continue;
                }
                let name = parameter["name"].as_str().unwrap();
                let schema = resolve(&parameter["schema"]);
                let typed = match name {
                    "status" | "state" | "class" | "kind" => schema["enum"].is_array(),
                    "created_after" | "created_before" | "since" | "until" => {
                        schema["format"] == "date-time"
                    }
                    "attempt" | "payment_attempt_id" => schema["format"] == "uuid",
                    "limit" => schema["type"] == "integer" && schema["maximum"].is_number(),
                    "discarded" => schema["type"] == "boolean",
                    // A cursor: an attempt's (text) or a dead letter's sequence.
                    "after" => schema["type"] == "string" || schema["type"] == "integer",
                    _ if free_text.contains(&name) => schema["type"] == "string",
                    _ => false,
                };
                if !typed {
                    untyped.push(format!("{method} {path} ?{name}: {schema}"));
                }
            }
            if let Some(body) = operation.get("requestBody") {
                let schema = &body["content"]["application/json"]["schema"];
                if schema.as_object().is_none_or(|o| o.is_empty()) {
                    untyped.push(format!("{method} {path} body: {schema}"));
                }
            }
        }
    }
    assert!(
        untyped.is_empty(),
        "parameters and bodies without their type:\n{}",
        untyped.join("\n")
    );
}
