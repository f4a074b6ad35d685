//! The OpenAPI document served at `GET /v1/openapi.json` describes exactly the `/v1`
//! routes the router registers: every `.route("/v1...", get(..).post(..))` in the router
//! sources is in the document with the same methods, every documented operation is
//! answered by the real router on loopback (no unmatched-route 404 or 405), and the
//! served document is the checked-in one. CI runs this test.

use crate::support;

use std::collections::BTreeSet;

use serde_json::Value;
use support::admin::{http_client, AdminServer};
use support::TestDb;

/// The files that register routes on the admin listener.
const ROUTER_SOURCES: [&str; 2] = ["src/admin/mod.rs", "src/api/mod.rs"];
const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

/// `(METHOD, path)` of every `/v1` route registered in `source`.
fn registered_routes(source: &str) -> BTreeSet<(String, String)> {
    let mut routes = BTreeSet::new();
    for (start, _) in source.match_indices(".route(") {
        let rest = &source[start + ".route(".len()..];
        let Some(open) = rest.find('"') else { continue };
        let Some(len) = rest[open + 1..].find('"') else {
            continue;
        };
        let path = &rest[open + 1..open + 1 + len];
        if !path.starts_with("/v1") {
            continue;
        }
        // The route's method router runs to the parenthesis closing `.route(`.
        let mut depth = 1;
        let mut end = rest.len();
        for (i, c) in rest.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i;
                        break;
                    }
                }
                _ => {}
            }
        }
        let body = &rest[open + 1 + len..end];
        for method in METHODS {
            let called = body.match_indices(&format!("{method}(")).any(|(i, _)| {
                i == 0 || !body[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_')
            });
            if called {
                routes.insert((method.to_uppercase(), path.to_owned()));
            }
        }
    }
    routes
}

fn documented_routes(doc: &Value) -> BTreeSet<(String, String)> {
    let mut routes = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("path item").keys() {
            if METHODS.contains(&method.as_str()) {
                routes.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    routes
}

fn checked_in() -> Value {
    serde_json::from_str(outboxd::admin::openapi::DOCUMENT).expect("openapi.json parses")
}

#[test]
fn every_v1_route_is_documented_and_nothing_else() {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut registered = BTreeSet::new();
    for file in ROUTER_SOURCES {
        let source = std::fs::read_to_string(format!("{root}/{file}")).unwrap();
        registered.extend(registered_routes(&source));
    }
    assert!(registered.contains(&("GET".to_owned(), outboxd::admin::openapi::PATH.to_owned())));
    assert!(
        registered.len() >= 10,
        "the route scan found too little: {registered:?}"
    );
    let documented = documented_routes(&checked_in());
    let undocumented: Vec<_> = registered.difference(&documented).collect();
    let unregistered: Vec<_> = documented.difference(&registered).collect();
    assert!(
        undocumented.is_empty(),
        "routes missing from src/admin/openapi.json: {undocumented:?}"
    );
    assert!(
        unregistered.is_empty(),
        "documented but not registered: {unregistered:?}"
    );
}

#[test]
fn the_route_scan_sees_methods_and_paths() {
    let source = r#"Router::new()
        .route("/v1/a", get(x::list).post(x::create))
        .route(
            "/v1/a/{id}/cancel",
            post(x::cancel),
        )
        .route("/healthz", get(h))"#;
    let found: Vec<(String, String)> = registered_routes(source).into_iter().collect();
    let expected = [
        ("GET", "/v1/a"),
        ("POST", "/v1/a"),
        ("POST", "/v1/a/{id}/cancel"),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    let mut expected = expected;
    expected.sort();
    assert_eq!(found, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_router_answers_every_documented_operation() {
    let t = TestDb::sqlite().await;
    let admin = AdminServer::start(&t.db).await;
    let http = http_client();
    for (method, path) in documented_routes(&checked_in()) {
        let url = format!("{}{}", admin.base, path.replace("{id}", "1"));
        let request = match method.as_str() {
            "GET" => http.get(&url),
            "POST" => http.post(&url).json(&serde_json::json!({})),
            other => panic!("no client for {other}"),
        };
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        assert!(
            response.headers().contains_key("x-request-id"),
            "{method} {path}: no x-request-id"
        );
        let body = response.text().await.unwrap();
        // Without a token every `/v1` route answers 401 (the document itself 200); an
        // unmatched route would answer 404 or 405 with an empty body.
        assert!(
            status != 405 && !(status == 404 && body.is_empty()),
            "{method} {path}: {status} {body:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_serves_the_checked_in_document() {
    let t = TestDb::sqlite().await;
    let admin = AdminServer::start(&t.db).await;
    let served: Value = http_client()
        .get(format!("{}/v1/openapi.json", admin.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(served, checked_in());
    assert_eq!(served["openapi"], "3.1.0");
}
