//! A request id on every response: generated (32 hex digits) or propagated from the
//! request's `x-request-id`, repeated in error bodies as `error.request_id`, and named in
//! the message of a 500.

use serde_json::Value;

use crate::support::admin::{http_client, AdminServer, ROOT};
use crate::support::TestDb;

/// `GET path` (as `root`, or with no token when `token` is false), sending `id` as
/// `x-request-id`; returns the status, the response's `x-request-id` and the body.
async fn get(
    server: &AdminServer,
    path: &str,
    token: bool,
    id: Option<&str>,
) -> (u16, String, Value) {
    let mut request = http_client().get(format!("{}{path}", server.base));
    if token {
        request = request.bearer_auth(ROOT);
    }
    if let Some(id) = id {
        request = request.header("x-request-id", id);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let header = response
        .headers()
        .get("x-request-id")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body = serde_json::from_str(&response.text().await.unwrap()).unwrap_or(Value::Null);
    (status, header, body)
}

async fn every_response_carries_a_request_id(t: &TestDb) {
    let server = AdminServer::start(&t.db).await;
    let (status, first, _) = get(&server, "/v1/intents", true, None).await;
    assert_eq!(status, 200);
    assert_eq!(first.len(), 32, "{first:?}");
    assert!(first.bytes().all(|b| b.is_ascii_hexdigit()));
    let (_, second, _) = get(&server, "/v1/intents", true, None).await;
    assert_ne!(first, second, "a new id per request");
    let (status, echoed, body) = get(&server, "/v1/intents", false, Some("trace-4242")).await;
    assert_eq!(status, 401);
    assert_eq!(echoed, "trace-4242");
    assert_eq!(body["error"]["request_id"], "trace-4242");
    let (status, replaced, body) =
        get(&server, "/v1/intents/999999", true, Some("two words")).await;
    assert_eq!(status, 404);
    assert_eq!(
        replaced.len(),
        32,
        "an unusable id is replaced: {replaced:?}"
    );
    assert_eq!(body["error"]["request_id"], replaced.as_str());
    // A database failure: 500 naming the request id to look up in the log.
    t.db.close().await;
    let (status, id, body) = get(&server, "/v1/intents", true, Some("trace-500")).await;
    assert_eq!(status, 500, "{body}");
    assert_eq!(id, "trace-500");
    assert_eq!(body["error"]["code"], "internal");
    assert_eq!(body["error"]["request_id"], "trace-500");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("details in the log") && message.contains("request id trace-500"),
        "{message}"
    );
}

crate::both_backends!(every_response_carries_a_request_id);
