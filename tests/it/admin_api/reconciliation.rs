//! `/v1/reconciliation`: the queue oldest first with filters, one item with its history,
//! resolutions (delivered / redispatch / abandoned) with their 400/404/409 answers, two
//! concurrent resolutions of one item (exactly one 200 and one 409), and the audit trail.

use std::time::Duration;

use outboxd::intent::IntentState;
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::support::admin::{code, unknown_intent, AdminServer, ACME_OPS, ACME_OPS_2, ACME_VIEWER};
use crate::support::harness::Harness;
use crate::support::TestDb;
use outboxd::store::ReconciliationItemId;

fn item_ids(body: &Value) -> Vec<ReconciliationItemId> {
    body["items"]
        .as_array()
        .unwrap_or_else(|| panic!("{body}"))
        .iter()
        .map(|i| ReconciliationItemId::new(i["id"].as_i64().unwrap()))
        .collect()
}

async fn queue_is_oldest_first_and_items_show_history(t: &TestDb) {
    let h = Harness::new(t).await;
    let (_, first) = unknown_intent(&h, "acme", "op-q-1").await;
    let (intent2, second) = unknown_intent(&h, "acme", "op-q-2").await;
    let server = AdminServer::start(&h.db).await;
    let api = server.api(Some(ACME_VIEWER));
    let (status, queue) = api.get("/v1/reconciliation").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(item_ids(&queue), vec![first, second]);
    assert_eq!(queue["items"][0]["operation_id"], "op-q-1");
    assert_eq!(
        item_ids(
            &api.get("/v1/reconciliation?action=send_notification")
                .await
                .1
        ),
        vec![first, second]
    );
    assert!(item_ids(&api.get("/v1/reconciliation?action=issue_refund").await.1).is_empty());
    assert!(item_ids(&api.get("/v1/reconciliation?older_than=1h").await.1).is_empty());
    let (_, page) = api.get("/v1/reconciliation?limit=1").await;
    assert_eq!(
        (item_ids(&page), page["next_after_id"].as_i64()),
        (vec![first], Some(first.get()))
    );
    assert_eq!(
        item_ids(
            &api.get(&format!("/v1/reconciliation?after_id={first}"))
                .await
                .1
        ),
        vec![second]
    );

    let (status, detail) = api.get(&format!("/v1/reconciliation/{second}")).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    assert_eq!(
        (
            detail["item"]["id"].as_i64(),
            detail["intent"]["id"].as_i64()
        ),
        (Some(second.get()), Some(intent2.get()))
    );
    assert_eq!(detail["intent"]["state"], "unknown");
    let attempt = &detail["attempts"][0];
    assert_eq!(
        (
            attempt["class"].as_str(),
            attempt["attempt_number"].as_i64()
        ),
        (Some("ambiguous"), Some(1))
    );
    assert!(
        attempt["started_at"].is_string() && attempt["ended_at"].is_string(),
        "{attempt}"
    );
    for path in ["/v1/reconciliation/999999", "/v1/reconciliation/x"] {
        assert_eq!(api.get(path).await.0, StatusCode::NOT_FOUND, "{path}");
    }
}

async fn resolve_refuses_incomplete_requests(t: &TestDb) {
    let h = Harness::new(t).await;
    let (intent_id, item) = unknown_intent(&h, "acme", "op-resolve").await;
    let server = AdminServer::start(&h.db).await;
    let api = server.api(Some(ACME_OPS));
    let path = format!("/v1/reconciliation/{item}/resolve");
    for (body, field) in [
        (
            json!({"resolution": "delivered", "provider_ref": "re_1"}),
            "note",
        ),
        (
            json!({"resolution": "delivered", "note": "seen"}),
            "provider_ref",
        ),
        (
            json!({"resolution": "abandoned", "provider_ref": "re_1", "note": "n"}),
            "provider_ref",
        ),
        (json!({"resolution": "retry", "note": "n"}), "resolution"),
        (json!({"note": "n"}), "body"),
    ] {
        let (status, answer) = api.post(&path, body.clone()).await;
        assert_eq!(
            (status, answer["error"]["field"].as_str()),
            (StatusCode::BAD_REQUEST, Some(field)),
            "{body}"
        );
    }
    assert_eq!(
        h.intent(intent_id).await.state,
        IntentState::Unknown,
        "nothing applied yet"
    );
}

async fn resolve_applies_once_then_answers_409(t: &TestDb) {
    let h = Harness::new(t).await;
    let (intent_id, item) = unknown_intent(&h, "acme", "op-resolve").await;
    let server = AdminServer::start(&h.db).await;
    let api = server.api(Some(ACME_OPS));
    let (status, body) = api.resolve(item, "delivered", Some("re_42")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        (
            body["item"]["resolution"].as_str(),
            body["item"]["resolved_by"].as_str()
        ),
        (Some("delivered"), Some("acme-ops"))
    );
    let intent = h.intent(intent_id).await;
    assert_eq!(
        (intent.state, intent.provider_ref.as_deref()),
        (IntentState::Delivered, Some("re_42"))
    );

    let (status, again) = server
        .api(Some(ACME_OPS_2))
        .resolve(item, "abandoned", None)
        .await;
    assert_eq!(
        (status, code(&again)),
        (StatusCode::CONFLICT, "already_resolved")
    );
    assert_eq!(
        (
            again["error"]["resolved_by"].as_str(),
            again["error"]["resolution"].as_str()
        ),
        (Some("acme-ops"), Some("delivered"))
    );
    assert!(again["error"]["resolved_at"].is_string());
    assert_eq!(
        h.intent(intent_id).await.state,
        IntentState::Delivered,
        "the loser changed nothing"
    );
    assert_eq!(
        api.resolve(ReconciliationItemId::new(999_999), "abandoned", None)
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    assert!(item_ids(&api.get("/v1/reconciliation").await.1).is_empty());

    let (_, audit) = api.get("/v1/audit").await;
    let entries = audit["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{audit}");
    assert_eq!(
        (entries[0]["action"].as_str(), entries[0]["actor"].as_str()),
        (Some("reconciliation.resolve"), Some("acme-ops"))
    );
    assert_eq!(entries[0]["note"], "checked at the provider");
}

async fn redispatch_pokes_the_dispatcher_and_abandon_is_terminal(t: &TestDb) {
    let h = Harness::new(t).await;
    let (resend, resend_item) = unknown_intent(&h, "acme", "op-resend").await;
    let (drop_it, drop_item) = unknown_intent(&h, "acme", "op-drop").await;
    let server = AdminServer::start(&h.db).await;
    let api = server.api(Some(ACME_OPS));
    let (status, body) = api.resolve(resend_item, "redispatch", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    tokio::time::timeout(Duration::from_secs(5), server.wake.notified())
        .await
        .expect("poked");
    assert_eq!(h.intent(resend).await.state, IntentState::Pending);
    let (status, _) = api.resolve(drop_item, "abandoned", None).await;
    assert_eq!(status, StatusCode::OK);
    h.dispatcher.drain().await.unwrap();
    let resent = h.intent(resend).await;
    assert_eq!(resent.state, IntentState::Delivered);
    assert_eq!(
        h.provider
            .request_count_for_key(resent.idempotency_key.as_str()),
        2,
        "sent again, same key"
    );
    assert_eq!(h.intent(drop_it).await.state, IntentState::Abandoned);
}

async fn concurrent_resolutions_have_exactly_one_winner(t: &TestDb) {
    let h = Harness::new(t).await;
    let server = AdminServer::start(&h.db).await;
    let (alice, bob) = (server.api(Some(ACME_OPS)), server.api(Some(ACME_OPS_2)));
    for round in 0..4 {
        let (intent_id, item) = unknown_intent(&h, "acme", &format!("op-race-{round}")).await;
        let (a, b) = tokio::join!(
            alice.resolve(item, "delivered", Some("re_race")),
            bob.resolve(item, "abandoned", None)
        );
        let mut statuses = [a.0, b.0];
        statuses.sort();
        assert_eq!(
            statuses,
            [StatusCode::OK, StatusCode::CONFLICT],
            "round {round}: {a:?} {b:?}"
        );
        let (winner, loser, state) = if a.0 == StatusCode::OK {
            (a, b, IntentState::Delivered)
        } else {
            (b, a, IntentState::Abandoned)
        };
        assert_eq!(
            loser.1["error"]["resolved_by"],
            winner.1["item"]["resolved_by"]
        );
        assert_eq!(h.intent(intent_id).await.state, state);
    }
    let (_, audit) = alice.get("/v1/audit").await;
    assert_eq!(
        audit["entries"].as_array().unwrap().len(),
        4,
        "one resolution recorded per item"
    );
}

crate::both_backends!(
    queue_is_oldest_first_and_items_show_history,
    resolve_refuses_incomplete_requests,
    resolve_applies_once_then_answers_409,
    redispatch_pokes_the_dispatcher_and_abandon_is_terminal,
    concurrent_resolutions_have_exactly_one_winner
);
