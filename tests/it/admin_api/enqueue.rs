//! `POST /v1/intents`: 201 created (audited, dispatcher poked, then delivered), 200 for a
//! replay (not audited again), 409 for a changed payload (nothing changes), 400 naming the
//! invalid field.

use std::time::Duration;

use outboxd::intent::{IntentId, IntentState};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::support::admin::{code, http_client, AdminServer, ROOT};
use crate::support::harness::{Harness, REFUND};
use crate::support::TestDb;

fn refund(op: &str, amount: i64) -> Value {
    json!({"tenant": "acme", "operation_id": op, "action": REFUND,
        "payload": {"order": 7, "amount": amount}, "ordering_key": "order-7"})
}

async fn create_replay_and_conflict(t: &TestDb) {
    let h = Harness::new(t).await;
    let server = AdminServer::start(&h.db).await;
    let url = format!("{}/v1/intents", server.base);
    let created = http_client()
        .post(&url)
        .bearer_auth(ROOT)
        .json(&refund("op-http-1", 1250))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    let location = created.headers()["location"].to_str().unwrap().to_owned();
    let receipt: Value = created.json().await.unwrap();
    let id = IntentId::new(receipt["intent_id"].as_i64().unwrap());
    assert_eq!(location, format!("/v1/intents/{id}"));
    assert_eq!(
        (receipt["replayed"].clone(), receipt["state"].clone()),
        (json!(false), json!("pending"))
    );
    assert!(receipt["idempotency_key"]
        .as_str()
        .unwrap()
        .starts_with("obx2_"));
    tokio::time::timeout(Duration::from_secs(5), server.wake.notified())
        .await
        .expect("the dispatcher is poked after an enqueue");

    let api = server.api(Some(ROOT));
    let (status, replay) = api.post("/v1/intents", refund("op-http-1", 1250)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(replay["replayed"], true);
    assert_eq!(
        (replay["intent_id"].as_i64(), &replay["idempotency_key"]),
        (Some(id.get()), &receipt["idempotency_key"])
    );

    let (status, conflict) = api.post("/v1/intents", refund("op-http-1", 9999)).await;
    assert_eq!(
        (status, code(&conflict)),
        (StatusCode::CONFLICT, "conflict")
    );
    assert_eq!(
        h.intent(id).await.payload.to_value(),
        json!({"order": 7, "amount": 1250})
    );

    let (_, audit) = api.get("/v1/audit").await;
    let entries = audit["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "only the creation is audited: {audit}");
    assert_eq!(
        (entries[0]["action"].as_str(), entries[0]["actor"].as_str()),
        (Some("intent.enqueue"), Some("root"))
    );
    assert_eq!(
        (
            entries[0]["tenant"].as_str(),
            entries[0]["intent_id"].as_i64()
        ),
        (Some("acme"), Some(id.get()))
    );
}

async fn an_enqueued_intent_is_delivered_once_and_replays_are_receipts(t: &TestDb) {
    let h = Harness::new(t).await;
    let server = AdminServer::start(&h.db).await;
    let api = server.api(Some(ROOT));
    let (status, receipt) = api.post("/v1/intents", refund("op-http-1", 1250)).await;
    assert_eq!(status, StatusCode::CREATED);
    let id = IntentId::new(receipt["intent_id"].as_i64().unwrap());
    // The intent is an ordinary intent: the dispatcher delivers it with the stored key.
    h.dispatcher.drain().await.unwrap();
    let delivered = h.intent(id).await;
    assert_eq!(delivered.state, IntentState::Delivered);
    assert_eq!(
        h.provider
            .effects_for_key(delivered.idempotency_key.as_str())
            .len(),
        1
    );
    let (status, replay) = api.post("/v1/intents", refund("op-http-1", 1250)).await;
    assert_eq!(
        (status, &replay["state"]),
        (StatusCode::OK, &json!("delivered")),
        "a receipt, not a resend"
    );
    h.dispatcher.drain().await.unwrap();
    assert_eq!(
        h.provider
            .effects_for_key(delivered.idempotency_key.as_str())
            .len(),
        1
    );
}

async fn invalid_requests_name_the_field(t: &TestDb) {
    let h = Harness::new(t).await;
    let server = AdminServer::start(&h.db).await;
    let api = server.api(Some(ROOT));
    let mut cases = Vec::new();
    let mut with = |key: &str, value: Value, field: &str| {
        let mut body = refund("op-bad", 1);
        body[key] = value;
        cases.push((body, field.to_owned()));
    };
    with("operation_id", json!(" padded"), "operation_id");
    with("tenant", json!(""), "tenant");
    with("action", json!("issue refund"), "action");
    with("payload", json!([1, 2]), "payload");
    with("payload_version", json!(0), "payload_version");
    with("idempotency_key", json!("k\u{7}"), "idempotency_key");
    with("idempotencyKey", json!("typo"), "body");
    with("not_before", json!("tomorrow"), "body");
    let mut missing = refund("op-bad", 1);
    missing.as_object_mut().unwrap().remove("payload");
    cases.push((missing, "body".to_owned()));
    for (body, field) in cases {
        let (status, answer) = api.post("/v1/intents", body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        assert_eq!(
            answer["error"]["field"].as_str(),
            Some(field.as_str()),
            "{body}: {answer}"
        );
    }
    let (status, _) = api.post("/v1/intents", json!("not an object")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (_, list) = api.get("/v1/intents").await;
    assert_eq!(list["intents"], json!([]), "nothing recorded");
}

crate::both_backends!(
    create_replay_and_conflict,
    an_enqueued_intent_is_delivered_once_and_replays_are_receipts,
    invalid_requests_name_the_field
);
