//! Deadlines are enforced at send time, on both backends: an intent whose deadline (its own
//! `deadline_at`, or the retry policy's overall deadline counted from the start of its
//! budget) has passed by the time it is claimed is not sent. It ends `failed`, or `unknown`
//! when an earlier attempt was ambiguous, and the admin API shows the deadline.

use crate::support;

use chrono::{Duration as Span, Utc};
use outboxd::action::AttemptClass;
use outboxd::fake_provider::{Fault, FaultRule, Matcher};
use outboxd::intent::{IntentId, IntentState};
use outboxd::NewIntent;
use reqwest::StatusCode;
use serde_json::json;
use support::admin::{AdminServer, ROOT};
use support::harness::{exec, Harness, NOTIFY, REFUND};
use support::invariants::assert_invariants;
use support::TestDb;

async fn classes(h: &Harness, id: IntentId) -> Vec<Option<AttemptClass>> {
    let attempts = h.store.list_attempts(id).await.unwrap();
    attempts.iter().map(|a| a.class).collect()
}

/// An intent enqueued with a deadline already past is never sent: `failed`, one `not_sent`
/// attempt saying why, no request at the provider.
async fn deadline_past_at_enqueue_is_not_sent(t: &TestDb) {
    let h = Harness::new(t).await;
    let intent = NewIntent::new("acme", "op-late", REFUND, json!({"amount": 100}))
        .with_deadline(Utc::now() - Span::seconds(1));
    let r = h.enqueue(intent).await;
    let step = h.dispatcher.run_once().await.unwrap();
    assert_eq!((step.claimed, step.failed), (1, 1), "{step:?}");
    let row = h.intent(r.intent_id).await;
    assert_eq!(row.state, IntentState::Failed);
    assert!(
        row.last_error.as_deref().unwrap_or("").contains("deadline"),
        "{:?}",
        row.last_error
    );
    assert_eq!(h.provider.request_count_for_key(&r.idempotency_key), 0);
    assert_eq!(
        classes(&h, r.intent_id).await,
        vec![Some(AttemptClass::NotSent)]
    );
    assert_invariants(&h).await;
}

/// The retry policy's overall deadline (one hour from enqueue in the harness) passes while
/// the intent waits in a backlog: it is not sent when finally claimed.
async fn policy_deadline_passed_in_backlog_is_not_sent(t: &TestDb) {
    let h = Harness::new(t).await;
    let r = h.enqueue_simple("op-backlog", NOTIFY).await;
    exec(
        &h.db,
        "UPDATE outbox_intents SET created_at = created_at - 7200000",
        "UPDATE outbox_intents SET created_at = created_at - interval '2 hours'",
    )
    .await;
    let step = h.dispatcher.run_once().await.unwrap();
    assert_eq!(step.failed, 1, "{step:?}");
    assert_eq!(h.intent(r.intent_id).await.state, IntentState::Failed);
    assert_eq!(h.provider.request_count_for_key(&r.idempotency_key), 0);
    assert_invariants(&h).await;
}

/// A keyed retry after an ambiguous attempt whose deadline passes during an outage is not
/// sent: the first request may have acted, so the intent goes to reconciliation.
async fn deadline_passed_after_ambiguous_attempt_goes_to_reconciliation(t: &TestDb) {
    let h = Harness::new(t).await;
    let r = h.enqueue_simple("op-outage", REFUND).await;
    h.provider.push_fault(FaultRule {
        matcher: Matcher::Key(r.idempotency_key.clone()),
        fault: Fault::Status500AfterApply,
        times: 1,
    });
    let step = h.dispatcher.run_once().await.unwrap();
    assert_eq!(step.retried, 1, "{step:?}");
    // The outage outlasts the intent's deadline.
    exec(
        &h.db,
        &format!(
            "UPDATE outbox_intents SET deadline_at = {}",
            (Utc::now() - Span::seconds(1)).timestamp_millis()
        ),
        "UPDATE outbox_intents SET deadline_at = now() - interval '1 second'",
    )
    .await;
    h.make_due().await;
    let step = h.dispatcher.run_once().await.unwrap();
    assert_eq!(step.unknown, 1, "{step:?}");
    assert_eq!(h.intent(r.intent_id).await.state, IntentState::Unknown);
    assert_eq!(h.open_items(r.intent_id).await, 1);
    assert_eq!(h.provider.request_count_for_key(&r.idempotency_key), 1);
    assert_eq!(
        classes(&h, r.intent_id).await,
        vec![Some(AttemptClass::Ambiguous), Some(AttemptClass::NotSent)]
    );
    assert_invariants(&h).await;
}

/// The admin API shows the producer's deadline, in the list and in the detail.
async fn admin_api_shows_the_deadline(t: &TestDb) {
    let h = Harness::new(t).await;
    let deadline = (Utc::now() + Span::days(2))
        .format("%Y-%m-%dT%H:%M:%S")
        .to_string();
    let intent = NewIntent::new("acme", "op-shown", REFUND, json!({"amount": 1}))
        .with_not_before(Utc::now() + Span::days(1))
        .with_deadline(format!("{deadline}Z").parse().unwrap());
    let id = h.enqueue(intent).await.intent_id;
    let server = AdminServer::start(&h.db).await;
    let api = server.api(Some(ROOT));
    let (status, detail) = api.get(&format!("/v1/intents/{id}")).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    let shown = detail["intent"]["deadline_at"].as_str().unwrap_or_default();
    assert!(shown.starts_with(&deadline), "{detail}");
    let (_, list) = api.get("/v1/intents").await;
    let shown = list["intents"][0]["deadline_at"]
        .as_str()
        .unwrap_or_default();
    assert!(shown.starts_with(&deadline), "{list}");
}

both_backends!(
    deadline_past_at_enqueue_is_not_sent,
    policy_deadline_passed_in_backlog_is_not_sent,
    deadline_passed_after_ambiguous_attempt_goes_to_reconciliation,
    admin_api_shows_the_deadline,
);
