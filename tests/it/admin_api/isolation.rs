//! Tenant isolation on every route: a token for `acme` gets no data about and has no effect
//! on `globex` — lists are filtered, guessed ids answer exactly like missing ones (404) and
//! change nothing, enqueueing for `globex` is refused before any lookup, a replay of a
//! `globex` operation id by the `acme` token reveals nothing, and the audit log hides
//! `globex`'s entries.

use chrono::{Duration, Utc};
use outboxd::intent::{IntentId, IntentState};
use outboxd::NewIntent;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::support::admin::{
    code, unknown_intent, AdminServer, ACME_OPS, ACME_VIEWER, GLOBEX_OPS, ROOT,
};
use crate::support::harness::{Harness, REFUND};
use crate::support::TestDb;
use outboxd::store::ReconciliationItemId;

/// Two tenants' data: `(acme unknown intent, acme item, globex unknown intent, globex item,
/// globex pending intent)`.
async fn two_tenants(
    h: &Harness,
) -> (
    IntentId,
    ReconciliationItemId,
    IntentId,
    ReconciliationItemId,
    IntentId,
) {
    let (acme_intent, acme_item) = unknown_intent(h, "acme", "op-a").await;
    let (globex_intent, globex_item) = unknown_intent(h, "globex", "op-g").await;
    let pending = NewIntent::new(
        "globex",
        "op-g-pending",
        REFUND,
        json!({"secret": "globex-only"}),
    )
    .with_not_before(Utc::now() + Duration::days(1));
    let globex_pending = h.enqueue(pending).await.intent_id;
    (
        acme_intent,
        acme_item,
        globex_intent,
        globex_item,
        globex_pending,
    )
}

fn field_ids<T: From<i64>>(body: &Value, list: &str) -> Vec<T> {
    body[list]
        .as_array()
        .unwrap_or_else(|| panic!("{body}"))
        .iter()
        .map(|i| T::from(i["id"].as_i64().unwrap()))
        .collect()
}

async fn lists_and_audit_show_only_the_tokens_tenants(t: &TestDb) {
    let h = Harness::new(t).await;
    let (acme_intent, acme_item, globex_intent, globex_item, globex_pending) =
        two_tenants(&h).await;
    let server = AdminServer::start(&h.db).await;
    let globex = server.api(Some(GLOBEX_OPS));
    let (status, _) = globex
        .post(
            &format!("/v1/intents/{globex_pending}/cancel"),
            json!({"note": "globex private note"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    for token in [ACME_OPS, ACME_VIEWER] {
        let acme = server.api(Some(token));
        assert_eq!(
            field_ids::<IntentId>(&acme.get("/v1/intents").await.1, "intents"),
            vec![acme_intent]
        );
        assert!(
            field_ids::<i64>(&acme.get("/v1/intents?tenant=globex").await.1, "intents").is_empty()
        );
        assert!(field_ids::<i64>(
            &acme.get("/v1/intents?tenant=globex&state=unknown").await.1,
            "intents"
        )
        .is_empty());
        assert_eq!(
            field_ids::<ReconciliationItemId>(&acme.get("/v1/reconciliation").await.1, "items"),
            vec![acme_item]
        );
        assert!(field_ids::<i64>(
            &acme.get("/v1/reconciliation?tenant=globex").await.1,
            "items"
        )
        .is_empty());
        let (_, audit) = acme.get("/v1/audit").await;
        assert_eq!(
            audit["entries"],
            json!([]),
            "globex's cancel is hidden from {token}"
        );
        assert!(!audit.to_string().contains("globex"));
    }
    assert_eq!(
        field_ids::<IntentId>(&globex.get("/v1/intents").await.1, "intents"),
        vec![globex_intent, globex_pending]
    );
    assert_eq!(
        field_ids::<ReconciliationItemId>(&globex.get("/v1/reconciliation").await.1, "items"),
        vec![globex_item]
    );
    assert_eq!(
        globex.get("/v1/audit").await.1["entries"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let root = server.api(Some(ROOT));
    assert_eq!(
        field_ids::<IntentId>(&root.get("/v1/intents").await.1, "intents").len(),
        3
    );
    assert_eq!(
        field_ids::<ReconciliationItemId>(&root.get("/v1/reconciliation").await.1, "items").len(),
        2
    );
}

async fn guessed_ids_read_like_missing_ones(t: &TestDb) {
    let h = Harness::new(t).await;
    let (_, _, globex_intent, globex_item, globex_pending) = two_tenants(&h).await;
    let server = AdminServer::start(&h.db).await;
    let acme = server.api(Some(ACME_OPS));
    // The request id differs per request and says nothing about the id asked for.
    let without_request_id = |mut body: serde_json::Value| {
        body["error"]
            .as_object_mut()
            .and_then(|e| e.remove("request_id"))
            .expect("a request id in the error body");
        body
    };
    let missing = without_request_id(acme.get("/v1/intents/999999").await.1);
    for path in [
        format!("/v1/intents/{globex_intent}"),
        format!("/v1/intents/{globex_pending}"),
        format!("/v1/reconciliation/{globex_item}"),
    ] {
        let (status, body) = acme.get(&path).await;
        let body = without_request_id(body);
        assert_eq!(
            (status, &body),
            (StatusCode::NOT_FOUND, &missing),
            "{path} looks exactly like a missing id"
        );
    }
}

async fn guessed_ids_change_nothing(t: &TestDb) {
    let h = Harness::new(t).await;
    let (_, acme_item, globex_intent, globex_item, globex_pending) = two_tenants(&h).await;
    let server = AdminServer::start(&h.db).await;
    let acme = server.api(Some(ACME_OPS));
    for resolution in ["delivered", "redispatch", "abandoned"] {
        let (status, body) = acme
            .resolve(
                globex_item,
                resolution,
                (resolution == "delivered").then_some("re_x"),
            )
            .await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::NOT_FOUND, "not_found"),
            "{resolution}"
        );
    }
    let (status, _) = acme
        .post(
            &format!("/v1/intents/{globex_pending}/cancel"),
            json!({"note": "n"}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = acme
        .post(
            &format!("/v1/intents/{globex_intent}/cancel"),
            json!({"note": "n"}),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "not even a wrong_state answer"
    );
    let (_, run) = acme
        .post(
            "/v1/reconciliation/redispatch",
            json!({"dry_run": false, "note": "n", "tenant": "globex", "confirm_may_act_twice": true}),
        )
        .await;
    assert_eq!(run["items"], json!([]), "{run}");
    let (_, run) = acme
        .post(
            "/v1/reconciliation/redispatch",
            json!({"dry_run": false, "note": "n", "confirm_may_act_twice": true}),
        )
        .await;
    let touched: Vec<ReconciliationItemId> = run["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| ReconciliationItemId::new(l["item_id"].as_i64().unwrap()))
        .collect();
    assert_eq!(touched, vec![acme_item], "only acme's item: {run}");

    assert_eq!(h.intent(globex_intent).await.state, IntentState::Unknown);
    assert_eq!(h.intent(globex_pending).await.state, IntentState::Pending);
    let items = h
        .store
        .reconciliation_for_intent(globex_intent)
        .await
        .unwrap();
    assert!(
        items[0].resolved_at.is_none(),
        "globex's item is still open"
    );
    let (_, audit) = server.api(Some(GLOBEX_OPS)).get("/v1/audit").await;
    assert_eq!(audit["entries"], json!([]), "nothing happened to globex");
}

async fn enqueue_for_another_tenant_reveals_nothing(t: &TestDb) {
    let h = Harness::new(t).await;
    let payload = json!({"amount": 5});
    let theirs = h
        .enqueue(NewIntent::new(
            "globex",
            "shared-op",
            REFUND,
            payload.clone(),
        ))
        .await;
    let server = AdminServer::start(&h.db).await;
    let acme = server.api(Some(ACME_OPS));
    let body = |tenant: &str, payload: &Value| json!({"tenant": tenant, "operation_id": "shared-op", "action": REFUND, "payload": payload});
    for attempt in [payload.clone(), json!({"amount": 6})] {
        let (status, answer) = acme.post("/v1/intents", body("globex", &attempt)).await;
        assert_eq!(
            (status, code(&answer)),
            (StatusCode::FORBIDDEN, "forbidden"),
            "no replay, no conflict: {answer}"
        );
        let text = answer.to_string();
        assert!(
            !text.contains(&theirs.idempotency_key) && !text.contains("intent_id"),
            "{text}"
        );
    }
    let (status, mine) = acme.post("/v1/intents", body("acme", &payload)).await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "the same operation id in acme is acme's own: {mine}"
    );
    assert_eq!(mine["replayed"], false);
    assert_ne!(mine["intent_id"].as_i64(), Some(theirs.intent_id.get()));
    assert_ne!(
        mine["idempotency_key"].as_str(),
        Some(theirs.idempotency_key.as_str())
    );
    let (_, globex_view) = server.api(Some(GLOBEX_OPS)).get("/v1/intents").await;
    assert_eq!(
        field_ids::<IntentId>(&globex_view, "intents"),
        vec![theirs.intent_id],
        "globex unchanged"
    );
}

crate::both_backends!(
    lists_and_audit_show_only_the_tokens_tenants,
    guessed_ids_read_like_missing_ones,
    guessed_ids_change_nothing,
    enqueue_for_another_tenant_reveals_nothing
);
