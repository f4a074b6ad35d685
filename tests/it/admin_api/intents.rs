//! `GET /v1/intents` (filters, pagination, bad parameters), `GET /v1/intents/{id}` (attempts
//! and reconciliation items) and `POST /v1/intents/{id}/cancel` (200, 409, 400, 404).

use chrono::{Duration, Utc};
use outboxd::NewIntent;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::support::admin::{code, unknown_intent, AdminServer, ACME_OPS, ROOT};
use crate::support::harness::{exec, Harness, REFUND};
use crate::support::TestDb;
use outboxd::intent::IntentId;

/// Enqueues an acme refund that stays pending (due tomorrow) through any drain.
pub async fn pending_refund(h: &Harness, op: &str) -> IntentId {
    let intent = NewIntent::new("acme", op, REFUND, json!({"op": op}))
        .with_not_before(Utc::now() + Duration::days(1));
    h.enqueue(intent).await.intent_id
}

fn ids(body: &Value) -> Vec<IntentId> {
    body["intents"]
        .as_array()
        .unwrap_or_else(|| panic!("no intents in {body}"))
        .iter()
        .map(|i| IntentId::new(i["id"].as_i64().unwrap()))
        .collect()
}

async fn list_filters_by_state_action_age_and_pages(t: &TestDb) {
    let h = Harness::new(t).await;
    let (unknown, _) = unknown_intent(&h, "acme", "op-unknown").await;
    let refund_a = pending_refund(&h, "op-refund-a").await;
    let refund_b = pending_refund(&h, "op-refund-b").await;
    exec(
        &h.db,
        &format!("UPDATE outbox_intents SET created_at = created_at - 7200000 WHERE id = {refund_a}"),
        &format!("UPDATE outbox_intents SET created_at = created_at - interval '2 hours' WHERE id = {refund_a}"),
    )
    .await;
    let server = AdminServer::start(&h.db).await;
    let api = server.api(Some(ROOT));

    let (status, all) = api.get("/v1/intents").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ids(&all), vec![unknown, refund_a, refund_b]);
    assert_eq!(all["next_after_id"], Value::Null);
    assert_eq!(
        ids(&api.get("/v1/intents?state=unknown").await.1),
        vec![unknown]
    );
    assert_eq!(
        ids(&api.get("/v1/intents?action=issue_refund").await.1),
        vec![refund_a, refund_b]
    );
    assert_eq!(
        ids(&api.get("/v1/intents?older_than=1h").await.1),
        vec![refund_a]
    );
    assert_eq!(
        ids(&api.get("/v1/intents?older_than=3600&state=pending").await.1),
        vec![refund_a]
    );
    assert_eq!(
        ids(&api
            .get("/v1/intents?tenant=acme&state=pending&action=send_notification")
            .await
            .1),
        Vec::<IntentId>::new()
    );

    let (_, page1) = api.get("/v1/intents?limit=2").await;
    assert_eq!(ids(&page1), vec![unknown, refund_a]);
    let next = page1["next_after_id"].as_i64().expect("a next page");
    let (_, page2) = api
        .get(&format!("/v1/intents?limit=2&after_id={next}"))
        .await;
    assert_eq!(ids(&page2), vec![refund_b]);
    assert_eq!(page2["next_after_id"], Value::Null);

    for (query, field) in [
        ("state=lost", "state"),
        ("older_than=soon", "older_than"),
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("after_id=abc", "query"),
        ("colour=red", "query"),
    ] {
        let (status, body) = api.get(&format!("/v1/intents?{query}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        assert_eq!(
            (code(&body), body["error"]["field"].as_str()),
            ("invalid_request", Some(field)),
            "{query}"
        );
    }
}

async fn show_has_payload_attempts_and_reconciliation(t: &TestDb) {
    let h = Harness::new(t).await;
    let (intent_id, item_id) = unknown_intent(&h, "acme", "op-show").await;
    let server = AdminServer::start(&h.db).await;
    let api = server.api(Some(ACME_OPS));
    let (status, body) = api.get(&format!("/v1/intents/{intent_id}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["intent"]["state"], "unknown");
    assert_eq!(body["intent"]["payload"], json!({"op": "op-show"}));
    let attempts = body["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0]["class"], "ambiguous");
    assert_eq!(attempts[0]["attempt_number"], 1);
    assert_eq!(body["reconciliation"][0]["id"], item_id.get());
    for path in ["/v1/intents/999999", "/v1/intents/abc", "/v1/intents/-1"] {
        let (status, body) = api.get(path).await;
        assert_eq!(
            (status, code(&body)),
            (StatusCode::NOT_FOUND, "not_found"),
            "{path}"
        );
    }
}

async fn cancel_a_pending_intent_once(t: &TestDb) {
    let h = Harness::new(t).await;
    let pending = pending_refund(&h, "op-cancel").await;
    let (unknown, _) = unknown_intent(&h, "acme", "op-not-pending").await;
    let server = AdminServer::start(&h.db).await;
    let api = server.api(Some(ACME_OPS));
    let path = format!("/v1/intents/{pending}/cancel");

    let (status, body) = api.post(&path, json!({})).await;
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("note"))
    );
    let (status, body) = api.post(&path, json!({"note": "  "})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = api
        .post(&path, json!({"note": "customer withdrew", "extra": 1}))
        .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "unknown fields are refused: {body}"
    );

    let (status, body) = api.post(&path, json!({"note": "customer withdrew"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["intent"]["state"], "cancelled");
    let (status, body) = api.post(&path, json!({"note": "again"})).await;
    assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "wrong_state"));
    assert_eq!(body["error"]["state"], "cancelled");
    let (status, body) = api
        .post(
            &format!("/v1/intents/{unknown}/cancel"),
            json!({"note": "n"}),
        )
        .await;
    assert_eq!((status, code(&body)), (StatusCode::CONFLICT, "wrong_state"));
    let (status, _) = api
        .post("/v1/intents/999999/cancel", json!({"note": "n"}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let (_, audit) = api.get("/v1/audit").await;
    let entries = audit["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{audit}");
    assert_eq!(entries[0]["action"], "intent.cancel");
    assert_eq!(entries[0]["actor"], "acme-ops");
    assert_eq!(entries[0]["intent_id"], pending.get());
    assert_eq!(entries[0]["note"], "customer withdrew");
}

/// A listing shows each payload as its JSON, exact numbers kept; a payload the parser
/// refuses (nested 200 deep, written by a hand-written `UPDATE`) is shown as a JSON string
/// of its stored text, so the page still parses for a client with the same parser.
async fn list_shows_payloads_as_json_and_a_refused_one_as_text(t: &TestDb) {
    let h = Harness::new(t).await;
    let payload: Value = serde_json::from_str(
        r#"{"amount":1.234567890123456789,"id":123456789012345678901234567890,"to":{"b":[1,2],"a":"é"}}"#,
    )
    .unwrap();
    let exact = NewIntent::new("acme", "op-exact", REFUND, payload.clone())
        .with_not_before(Utc::now() + Duration::days(1));
    let exact = h.enqueue(exact).await.intent_id;
    let odd = pending_refund(&h, "op-odd").await;
    // An object the API accepts whose stored form starts with serde_json's number marker
    // key (both backends store it first), which the parser then refuses.
    let marker = json!({"zzzzzzzzzzzzzzzzzzzzzzzzzzzzz": 1, "$serde_json::private::Number": "x"});
    let marker = NewIntent::new("acme", "op-marker", REFUND, marker)
        .with_not_before(Utc::now() + Duration::days(1));
    let marker = h.enqueue(marker).await.intent_id;
    let deep = format!("{{\"deep\":{}1{}}}", "[".repeat(200), "]".repeat(200));
    let set =
        |cast: &str| format!("UPDATE outbox_intents SET payload = '{deep}'{cast} WHERE id = {odd}");
    exec(&h.db, &set(""), &set("::jsonb")).await;
    let server = AdminServer::start(&h.db).await;
    let api = server.api(Some(ROOT));

    let (status, page) = api.get("/v1/intents?limit=500").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let shown = |id: IntentId| {
        page["intents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["id"] == id.get())
            .map(|i| i["payload"].clone())
            .unwrap_or_else(|| panic!("{id} not listed in {page}"))
    };
    assert_eq!(shown(exact), payload);
    let text: String = shown(odd)
        .as_str()
        .unwrap_or_else(|| panic!("not shown as text: {}", shown(odd)))
        .split_whitespace()
        .collect();
    assert_eq!(text, deep);
    let marker = shown(marker);
    assert!(
        marker.as_str().is_some_and(|t| t.contains("zzz")),
        "{marker}"
    );
}

crate::both_backends!(
    list_filters_by_state_action_age_and_pages,
    list_shows_payloads_as_json_and_a_refused_one_as_text,
    show_has_payload_attempts_and_reconciliation,
    cancel_a_pending_intent_once
);
