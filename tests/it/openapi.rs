//! The OpenAPI document served at `GET /v1/openapi.json` is generated from the router
//! (utoipa-axum registers each `/v1` route with its operation, so the document's
//! (method, path) set is the router's). Here: the served document is the generated one and
//! equals the checked-in `docs/openapi.json` (rewrite it with `OUTBOXD_BLESS_OPENAPI=1`);
//! every documented operation is answered by the real router and every other method on a
//! documented path is not (405); no `/v1` route is registered around the documentation;
//! and answers of the real server validate against their operation's schema — the main
//! operations here, and every answer the admin API tests get (see
//! `tests/support/openapi.rs`). CI runs this test.

use crate::support;

use std::collections::BTreeSet;

use serde_json::{json, Value};
use support::admin::{http_client, unknown_intent, AdminServer, ACME_OPS, ACME_VIEWER, ROOT};
use support::harness::Harness;
use support::openapi::{check_response, document, template_of, validate};
use support::TestDb;

const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

/// Where the checked-in copy of the document lives.
const SNAPSHOT: &str = "docs/openapi.json";

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

#[test]
fn the_checked_in_copy_is_the_generated_document() {
    let path = format!("{}/{SNAPSHOT}", env!("CARGO_MANIFEST_DIR"));
    let generated = outboxd::admin::openapi::document();
    if std::env::var_os("OUTBOXD_BLESS_OPENAPI").is_some() {
        std::fs::write(&path, generated).unwrap();
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "{SNAPSHOT} differs from the generated OpenAPI document; review the change and run \
         `OUTBOXD_BLESS_OPENAPI=1 cargo test --test it openapi::` to update it"
    );
}

#[test]
fn the_document_covers_the_v1_api() {
    let doc = document();
    assert_eq!(doc["openapi"], "3.1.0");
    let routes = documented_routes(doc);
    assert!(routes.contains(&("GET".into(), outboxd::admin::openapi::PATH.into())));
    assert!(routes.len() >= 11, "{routes:?}");
    for (method, path) in &routes {
        let operation = &doc["paths"][path][method.to_lowercase()];
        assert!(operation["summary"].is_string(), "{method} {path}: summary");
        assert!(operation["responses"]["200"].is_object() || method == "POST");
        if path != outboxd::admin::openapi::PATH {
            assert!(
                operation["responses"]["401"].is_object(),
                "{method} {path}: no 401"
            );
            assert!(operation["security"].is_null(), "{method} {path}: security");
        } else {
            assert_eq!(
                operation["security"],
                json!([]),
                "the document needs no token"
            );
        }
    }
    assert_eq!(doc["security"], json!([{"bearer": []}]));
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    let states = &doc["components"]["schemas"]["IntentState"]["enum"];
    assert_eq!(states.as_array().map(Vec::len), Some(7), "{states}");
}

/// The router's own sources register `/v1` routes only through `routes!`, which takes
/// each path from its handler's documentation.
#[test]
fn no_v1_route_is_registered_around_the_documentation() {
    let root = env!("CARGO_MANIFEST_DIR");
    for file in ["src/admin/mod.rs", "src/api/mod.rs"] {
        let source = std::fs::read_to_string(format!("{root}/{file}")).unwrap();
        let bypass = source.match_indices(".route(").any(|(at, _)| {
            source[at..]
                .trim_start_matches(".route(")
                .trim_start()
                .starts_with("\"/v1")
        });
        assert!(
            !bypass,
            "{file} registers a /v1 route with `.route(`: use `routes!`"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_router_answers_every_documented_operation_and_no_other() {
    let t = TestDb::sqlite().await;
    let admin = AdminServer::start(&t.db).await;
    let http = http_client();
    let documented = documented_routes(document());
    let paths: BTreeSet<&String> = documented.iter().map(|(_, p)| p).collect();
    for path in paths {
        let url = format!("{}{}", admin.base, path.replace("{id}", "1"));
        for method in ["GET", "POST", "PUT", "PATCH", "DELETE"] {
            let request = http.request(method.parse().unwrap(), &url).json(&json!({}));
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            assert!(
                response.headers().contains_key("x-request-id"),
                "{method} {path}: no x-request-id"
            );
            let body = response.text().await.unwrap();
            if documented.contains(&(method.to_owned(), path.clone())) {
                // Without a token every `/v1` route answers 401 (the document itself
                // 200); an unmatched route would answer 404 or 405 with an empty body.
                assert!(
                    status != 405 && !(status == 404 && body.is_empty()),
                    "{method} {path}: {status} {body:?}"
                );
                let body: Value = serde_json::from_str(&body).unwrap();
                check_response(method, path, status, &body);
            } else {
                assert_eq!(status, 405, "{method} {path} is served but not documented");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_serves_the_generated_document() {
    let t = TestDb::sqlite().await;
    let admin = AdminServer::start(&t.db).await;
    let response = http_client()
        .get(format!("{}/v1/openapi.json", admin.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    let served: Value = response.json().await.unwrap();
    assert_eq!(&served, document());
}

#[test]
fn paths_find_their_templates() {
    assert_eq!(template_of("/v1/intents?limit=2"), Some("/v1/intents"));
    assert_eq!(
        template_of("/v1/intents/7/cancel"),
        Some("/v1/intents/{id}/cancel")
    );
    assert_eq!(
        template_of("/v1/reconciliation/redispatch"),
        Some("/v1/reconciliation/redispatch")
    );
    assert_eq!(
        template_of("/v1/reconciliation/3"),
        Some("/v1/reconciliation/{id}")
    );
    assert_eq!(template_of("/review"), None);
}

/// The validator catches what it must: the check below is only as good as it is.
#[test]
fn the_validator_refuses_bodies_that_break_the_schema() {
    let page = &document()["components"]["schemas"]["IntentPage"];
    let ok = json!({"intents": [], "next_after_id": null});
    let mut errors = Vec::new();
    validate(page, &ok, "$", &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
    for bad in [
        json!({"intents": []}),
        json!({"intents": [], "next_after_id": "7"}),
        json!({"intents": [], "next_after_id": null, "extra": 1}),
        json!({"intents": [{"id": 1}], "next_after_id": null}),
    ] {
        let mut errors = Vec::new();
        validate(page, &bad, "$", &mut errors);
        assert!(!errors.is_empty(), "{bad} passed");
    }
    let error = &document()["components"]["schemas"]["ErrorBody"];
    let mut errors = Vec::new();
    validate(
        error,
        &json!({"error": {"code": "lost", "message": "m"}}),
        "$",
        &mut errors,
    );
    assert!(!errors.is_empty(), "an unknown code passed");
}

async fn main_operations_answer_as_documented(t: &TestDb) {
    let h = Harness::new(t).await;
    let (intent, item) = unknown_intent(&h, "acme", "op-doc-1").await;
    let (_, second) = unknown_intent(&h, "acme", "op-doc-2").await;
    let server = AdminServer::start(&h.db).await;
    // Every call below goes through `Api`, which validates each answer against the
    // document (status documented, body matching the schema).
    let ops = server.api(Some(ACME_OPS));
    let viewer = server.api(Some(ACME_VIEWER));
    let root = server.api(Some(ROOT));
    let enqueue = json!({"tenant": "acme", "operation_id": "op-doc-http",
        "action": "send_notification", "payload": {"n": 1}});
    assert_eq!(ops.post("/v1/intents", enqueue.clone()).await.0, 201);
    assert_eq!(ops.post("/v1/intents", enqueue.clone()).await.0, 200);
    let mut changed = enqueue.clone();
    changed["payload"] = json!({"n": 2});
    assert_eq!(ops.post("/v1/intents", changed).await.0, 409);
    assert_eq!(
        ops.post("/v1/intents", json!({"tenant": "acme"})).await.0,
        400
    );
    let mut elsewhere = enqueue.clone();
    elsewhere["tenant"] = json!("globex");
    assert_eq!(ops.post("/v1/intents", elsewhere).await.0, 403);
    assert_eq!(viewer.post("/v1/intents", enqueue).await.0, 403);
    assert_eq!(server.api(None).get("/v1/intents").await.0, 401);

    let (status, page) = viewer.get("/v1/intents?limit=1").await;
    assert_eq!(status, 200);
    assert_eq!(page["intents"].as_array().map(Vec::len), Some(1), "{page}");
    assert_eq!(viewer.get("/v1/intents?state=lost").await.0, 400);
    assert_eq!(viewer.get(&format!("/v1/intents/{intent}")).await.0, 200);
    assert_eq!(viewer.get("/v1/intents/999999").await.0, 404);
    let (_, listed) = viewer.get("/v1/intents?state=pending").await;
    let pending = listed["intents"][0]["id"]
        .as_i64()
        .expect("the HTTP intent");
    let cancel = |id: i64| format!("/v1/intents/{id}/cancel");
    let note = json!({"note": "not needed"});
    assert_eq!(ops.post(&cancel(pending), note.clone()).await.0, 200);
    assert_eq!(ops.post(&cancel(pending), note.clone()).await.0, 409);
    assert_eq!(ops.post(&cancel(pending), json!({})).await.0, 400);

    assert_eq!(viewer.get("/v1/reconciliation").await.0, 200);
    assert_eq!(
        viewer.get(&format!("/v1/reconciliation/{item}")).await.0,
        200
    );
    let dry = json!({"dry_run": true});
    let (status, report) = ops.post("/v1/reconciliation/redispatch", dry).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(
        report["items"].as_array().map(Vec::len),
        Some(2),
        "{report}"
    );
    let (status, _) = ops.resolve(item, "abandoned", None).await;
    assert_eq!(status, 200);
    assert_eq!(ops.resolve(item, "delivered", Some("re_1")).await.0, 409);
    let real = json!({"dry_run": false, "note": "sent again",
        "item_ids": [item, second], "confirm_may_act_twice": true});
    let (status, report) = ops.post("/v1/reconciliation/redispatch", real).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["summary"]["already_resolved"], 1, "{report}");
    assert_eq!(report["summary"]["redispatched"], 1, "{report}");
    assert_eq!(viewer.resolve(second, "abandoned", None).await.0, 403);

    let (status, audit) = root.get("/v1/audit?limit=2").await;
    assert_eq!(status, 200, "{audit}");
    assert!(audit["next_before_id"].is_i64(), "{audit}");
    assert_eq!(viewer.get("/v1/providers").await.0, 200);
}

crate::both_backends!(main_operations_answer_as_documented);
