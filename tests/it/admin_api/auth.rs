//! Authentication and roles: every route refuses a missing, malformed or unknown token with
//! 401 (never echoing it), and every mutation refuses a viewer with 403 before any lookup.

use reqwest::StatusCode;
use serde_json::json;

use crate::support::admin::{code, http_client, AdminServer, ACME_VIEWER, ROOT};
use crate::support::TestDb;

const ROUTES: [(&str, &str); 11] = [
    ("GET", "/v1/intents"),
    ("GET", "/v1/intents/1"),
    ("POST", "/v1/intents"),
    ("POST", "/v1/intents/1/cancel"),
    ("GET", "/v1/reconciliation"),
    ("GET", "/v1/reconciliation/1"),
    ("POST", "/v1/reconciliation/1/resolve"),
    ("POST", "/v1/reconciliation/redispatch"),
    ("GET", "/v1/audit"),
    ("GET", "/v1/audit?limit=5"),
    ("GET", "/v1/providers"),
];

async fn every_route_requires_a_valid_bearer_token(t: &TestDb) {
    let server = AdminServer::start(&t.db).await;
    let client = http_client();
    let wrong = "not-a-configured-token-123456";
    let headers = [
        None,
        Some(format!("Bearer {wrong}")),
        Some(format!("Basic {ROOT}")),
        Some(format!("Bearer {}", &ROOT[..ROOT.len() - 1])),
        Some("Bearer".to_owned()),
    ];
    for (method, path) in ROUTES {
        for header in &headers {
            let url = format!("{}{path}", server.base);
            let mut req = match method {
                "GET" => client.get(url),
                _ => client.post(url).json(&json!({})),
            };
            if let Some(h) = header {
                req = req.header("authorization", h);
            }
            let resp = req.send().await.unwrap();
            assert_eq!(
                resp.status(),
                StatusCode::UNAUTHORIZED,
                "{method} {path} {header:?}"
            );
            assert_eq!(resp.headers()["www-authenticate"], "Bearer");
            let text = resp.text().await.unwrap();
            assert!(
                !text.contains(wrong) && !text.contains(&ROOT[..20]),
                "{text}"
            );
            let body: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(code(&body), "unauthenticated");
        }
    }
}

async fn a_viewer_cannot_mutate_anything(t: &TestDb) {
    let server = AdminServer::start(&t.db).await;
    let viewer = server.api(Some(ACME_VIEWER));
    let mutations = [
        (
            "/v1/intents",
            json!({"tenant": "acme", "operation_id": "v-1", "action": "send_notification", "payload": {}}),
        ),
        ("/v1/intents/1/cancel", json!({"note": "n"})),
        (
            "/v1/reconciliation/1/resolve",
            json!({"resolution": "abandoned", "note": "n"}),
        ),
        ("/v1/reconciliation/redispatch", json!({"dry_run": true})),
    ];
    for (path, body) in mutations {
        let (status, body) = viewer.post(path, body).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {body}");
        assert_eq!(code(&body), "forbidden");
    }
    // Reads are fine for a viewer, and nothing was recorded.
    let (status, body) = viewer.get("/v1/intents").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["intents"], json!([]));
    let (_, audit) = server.api(Some(ROOT)).get("/v1/audit").await;
    assert_eq!(audit["entries"], json!([]));
}

crate::both_backends!(
    every_route_requires_a_valid_bearer_token,
    a_viewer_cannot_mutate_anything
);
