//! The admin router served on loopback for a test (a random port, stopped on drop), the
//! test tokens (operators and a viewer for two tenants, and one for every tenant), a small
//! JSON client whose every answer is checked against the OpenAPI document
//! ([`super::openapi`]), and a helper that puts an intent into reconciliation.

use std::sync::Arc;

use outboxd::action::resend::{ResendPolicies, ResendPolicy};
use outboxd::action::RetrySafety;
use outboxd::admin::{router, AdminContext};
use outboxd::config::{AdminToken, Role, Secret};
use outboxd::fake_provider::{Fault, FaultRule, Matcher};
use outboxd::intent::{IntentId, IntentState};
use outboxd::store::{Database, ReconciliationItemId};
use outboxd::NewIntent;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::sync::Notify;

use super::harness::{Harness, NOTIFY, REFUND, REQUEST_TIMEOUT};

/// Operator for every tenant (name `root`).
pub const ROOT: &str = "root-operator-token-000000000001";
/// Operator for `acme` (name `acme-ops`).
pub const ACME_OPS: &str = "acme-operator-token-00000000002";
/// A second operator for `acme` (name `acme-ops-2`).
pub const ACME_OPS_2: &str = "acme-operator-token-00000000022";
/// Viewer for `acme` (name `acme-viewer`).
pub const ACME_VIEWER: &str = "acme-viewer-token-000000000003";
/// Operator for `globex` (name `globex-ops`).
pub const GLOBEX_OPS: &str = "globex-operator-token-0000000004";

/// The tokens every admin test server accepts.
pub fn test_tokens() -> Vec<AdminToken> {
    let token = |name: &str, value: &str, role, tenants: &[&str]| AdminToken {
        name: name.to_owned(),
        token: Some(Secret::new(value)),
        token_env: None,
        token_file: None,
        role,
        tenants: tenants.iter().map(|t| t.to_string()).collect(),
    };
    vec![
        token("root", ROOT, Role::Operator, &["*"]),
        token("acme-ops", ACME_OPS, Role::Operator, &["acme"]),
        token("acme-ops-2", ACME_OPS_2, Role::Operator, &["acme"]),
        token("acme-viewer", ACME_VIEWER, Role::Viewer, &["acme"]),
        token("globex-ops", GLOBEX_OPS, Role::Operator, &["globex"]),
    ]
}

/// An HTTP client for loopback: no proxy, no automatic redirects.
pub fn http_client() -> reqwest::Client {
    outboxd::provider::install_crypto_provider();
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("http client")
}

/// What the test servers know of the harness' two actions: a keyed refund whose provider
/// keeps keys 24 h (as [`Harness::new`]) and a not-idempotent notification.
pub fn test_policies() -> ResendPolicies {
    let policy = |retry_safety| ResendPolicy {
        retry_safety,
        key_retention: std::time::Duration::from_secs(24 * 3600),
        request_timeout: REQUEST_TIMEOUT,
    };
    ResendPolicies::new([
        (REFUND.to_owned(), policy(RetrySafety::IdempotentWithKey)),
        (NOTIFY.to_owned(), policy(RetrySafety::NotIdempotent)),
    ])
}

/// The admin router on `127.0.0.1:<random>`, stopped when dropped.
pub struct AdminServer {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// The dispatcher wake-up the router pokes.
    pub wake: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl AdminServer {
    /// Serves the admin router on `db` with [`test_tokens`].
    pub async fn start(db: &Database) -> AdminServer {
        Self::start_with(db, |ctx| ctx).await
    }

    /// Like [`AdminServer::start`], with the context changed by `configure` first.
    pub async fn start_with(
        db: &Database,
        configure: impl FnOnce(AdminContext) -> AdminContext,
    ) -> AdminServer {
        let wake = Arc::new(Notify::new());
        let ctx = AdminContext::new(db.clone(), test_tokens(), wake.clone())
            .with_actions(test_policies());
        let ctx = configure(ctx);
        let app = router(ctx);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let base = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
            axum::serve(listener, app).await.expect("admin server");
        });
        AdminServer { base, wake, task }
    }

    /// A JSON client presenting `token` (none: no `Authorization` header).
    pub fn api(&self, token: Option<&str>) -> Api {
        Api {
            client: http_client(),
            base: self.base.clone(),
            token: token.map(str::to_owned),
        }
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A JSON client for the admin API.
pub struct Api {
    client: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl Api {
    fn auth(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    async fn finish(request: reqwest::RequestBuilder) -> (StatusCode, Value) {
        let response = request.send().await.expect("request");
        let status = response.status();
        let text = response.text().await.expect("body");
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// `GET path`; the answer is checked against the OpenAPI document.
    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        let url = format!("{}{path}", self.base);
        let (status, body) = Self::finish(self.auth(self.client.get(url))).await;
        super::openapi::check_response("GET", path, status.as_u16(), &body);
        (status, body)
    }

    /// `POST path` with a JSON body; the answer is checked against the OpenAPI document.
    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let url = format!("{}{path}", self.base);
        let request = self.auth(self.client.post(url).json(&body));
        let (status, body) = Self::finish(request).await;
        super::openapi::check_response("POST", path, status.as_u16(), &body);
        (status, body)
    }

    /// Resolves an item (`resolution`, optional reference, note; a redispatch confirmed).
    pub async fn resolve(
        &self,
        item_id: ReconciliationItemId,
        resolution: &str,
        provider_ref: Option<&str>,
    ) -> (StatusCode, Value) {
        // The person checked at the provider, so a redispatch is confirmed even if it may
        // act twice.
        let body = json!({"resolution": resolution, "provider_ref": provider_ref,
            "note": "checked at the provider",
            "confirm_may_act_twice": resolution == "redispatch"});
        self.post(&format!("/v1/reconciliation/{item_id}/resolve"), body)
            .await
    }
}

/// Enqueues a not-idempotent intent for `tenant` whose response is lost, so it ends in
/// reconciliation. Returns `(intent_id, item_id)`.
pub async fn unknown_intent(
    h: &Harness,
    tenant: &str,
    op: &str,
) -> (IntentId, ReconciliationItemId) {
    let r = h
        .enqueue(NewIntent::new(tenant, op, NOTIFY, json!({"op": op})))
        .await;
    h.provider.push_fault(FaultRule {
        matcher: Matcher::Key(r.idempotency_key.clone()),
        fault: Fault::LoseResponseAfterApply,
        times: 1,
    });
    h.dispatcher.drain().await.unwrap();
    assert_eq!(h.intent(r.intent_id).await.state, IntentState::Unknown);
    let items = h
        .store
        .reconciliation_for_intent(r.intent_id)
        .await
        .unwrap();
    assert_eq!(items.len(), 1);
    (r.intent_id, items[0].id)
}

/// The error code of an error response body.
pub fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("<no error code>")
}
