//! The request body is the payload as the dispatcher has always written it, whatever the
//! backend stored: compact JSON, object keys in bytewise order, strings and numbers as
//! stored. A claimed intent keeps only these bytes, not the parsed payload (a payload near
//! the size limit parses to tens of times its size); this pins the bytes to what a
//! provider saw before, so a retry after an upgrade sends the same body under the same key.

use crate::support;

use outboxd::intent::IntentState;
use outboxd::producer::NewIntent;
use serde_json::json;
use support::harness::{exec, Harness, REFUND};
use support::TestDb;

/// Enqueues one intent for tenant `acme`, delivers it in one step and returns the body of
/// the one request the provider received (under the intent's key).
async fn deliver_alone(h: &Harness, op: &str, payload: serde_json::Value) -> bytes::Bytes {
    let r = h.enqueue(NewIntent::new("acme", op, REFUND, payload)).await;
    let step = h.dispatcher.run_once().await.unwrap();
    assert_eq!(step.delivered, 1, "{step:?}");
    let sent = h.provider.requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].idempotency_key.as_deref(),
        Some(r.idempotency_key.as_str())
    );
    sent[0].body.clone()
}

async fn the_body_is_the_compact_payload_with_sorted_keys(t: &TestDb) {
    let h = Harness::new(t).await;
    // PostgreSQL's jsonb writes this back as `{"a": …, "mid": 10, "zeta": 1, "amount": …}`
    // (shorter keys first, a space after each separator); SQLite keeps the text it was given.
    let payload = json!({
        "zeta": 1,
        "amount": "12.50",
        "mid": 10,
        "a": {"y": [1, 2, 3], "b": "é\n\"q\""},
    });
    let body = deliver_alone(&h, "op-body", payload).await;
    assert_eq!(
        std::str::from_utf8(&body).unwrap(),
        r#"{"a":{"b":"é\n\"q\"","y":[1,2,3]},"amount":"12.50","mid":10,"zeta":1}"#
    );
}

/// A large payload of the densest shape (a long array of small numbers) goes out whole,
/// byte for byte.
async fn a_large_payload_is_sent_whole(t: &TestDb) {
    let h = Harness::new(t).await;
    let pad = vec![0; 20_000];
    let payload = json!({"pad": pad, "n": 7});
    let body = deliver_alone(&h, "op-large", payload).await;
    let expected = format!("{{\"n\":7,\"pad\":[{}0]}}", "0,".repeat(19_999));
    assert_eq!(body.len(), expected.len());
    assert!(
        body == expected.as_bytes(),
        "the body differs from the compact payload"
    );
}

/// A payload the database accepted but the dispatcher's JSON parser refuses (nested 200
/// deep, past its 128 levels; a hand-written `UPDATE` skips the insert checks) is sent as
/// stored: it neither fails the claim of the intents around it nor stops later claims,
/// and reading it back shows the stored text.
async fn a_payload_the_parser_refuses_does_not_stop_delivery(t: &TestDb) {
    let h = Harness::new(t).await;
    let a = h.enqueue_simple("op-a", REFUND).await;
    let odd = h.enqueue_simple("op-odd", REFUND).await;
    let deep = format!("{{\"deep\":{}1{}}}", "[".repeat(200), "]".repeat(200));
    assert!(serde_json::from_str::<serde_json::Value>(&deep).is_err());
    let sql = |cast: &str| {
        format!(
            "UPDATE outbox_intents SET payload = '{deep}'{cast} WHERE id = {}",
            odd.intent_id
        )
    };
    exec(&h.db, &sql(""), &sql("::jsonb")).await;
    let step = h
        .dispatcher
        .run_once()
        .await
        .expect("the claim batch is read");
    assert_eq!(step.delivered, 2, "{step:?}");
    let c = h.enqueue_simple("op-c", REFUND).await;
    let step = h.dispatcher.run_once().await.expect("a later claim");
    assert_eq!(step.delivered, 1, "{step:?}");
    for id in [a.intent_id, odd.intent_id, c.intent_id] {
        assert_eq!(h.intent(id).await.state, IntentState::Delivered);
    }
    // Read back (a listing, the console), it is the stored text as a JSON string.
    let shown = h.intent(odd.intent_id).await.payload.to_value();
    let shown: String = shown
        .as_str()
        .expect("shown as text")
        .split_whitespace()
        .collect();
    assert_eq!(shown, deep);
    let sent = h.provider.requests();
    let body = sent
        .iter()
        .find(|r| r.idempotency_key.as_deref() == Some(odd.idempotency_key.as_str()))
        .map(|r| String::from_utf8(r.body.to_vec()).unwrap())
        .expect("the odd intent was sent");
    let compact: String = body.chars().filter(|c| !c.is_whitespace()).collect();
    assert_eq!(compact, deep, "sent as stored");
}

both_backends!(
    the_body_is_the_compact_payload_with_sorted_keys,
    a_large_payload_is_sent_whole,
    a_payload_the_parser_refuses_does_not_stop_delivery
);

/// SQLite's JSON check accepts a payload that is not UTF-8 (text with a stray byte) or is a
/// BLOB: neither fails the claim of the intents around it. A BLOB holding UTF-8 JSON is
/// sent as that JSON; bytes that are not UTF-8 are not sent at all (nothing sent could be
/// the producer's JSON): the intent fails with the reason, and reads back with
/// replacement characters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_that_is_not_text_is_not_sent_on_sqlite() {
    let t = TestDb::sqlite().await;
    let h = Harness::new(&t).await;
    let a = h.enqueue_simple("op-a", REFUND).await;
    let blob = h.enqueue_simple("op-blob", REFUND).await;
    let bad = h.enqueue_simple("op-bad", REFUND).await;
    let set =
        |id, value: &str| format!("UPDATE outbox_intents SET payload = {value} WHERE id = {id}");
    let blob_sql = set(blob.intent_id, "X'7B2261223A317D'");
    exec(&h.db, &blob_sql, "SELECT 1").await;
    let bad_sql = set(bad.intent_id, "CAST(X'7B2261223A2280227D' AS TEXT)");
    exec(&h.db, &bad_sql, "SELECT 1").await;
    let step = h
        .dispatcher
        .run_once()
        .await
        .expect("the claim batch is read");
    assert_eq!((step.delivered, step.failed), (2, 1), "{step:?}");
    assert_eq!(h.intent(a.intent_id).await.state, IntentState::Delivered);
    assert_eq!(h.intent(blob.intent_id).await.state, IntentState::Delivered);
    let failed = h.intent(bad.intent_id).await;
    assert_eq!(failed.state, IntentState::Failed);
    assert!(
        failed
            .last_error
            .as_deref()
            .unwrap_or("")
            .contains("not UTF-8"),
        "{failed:?}"
    );
    assert_eq!(failed.payload.to_value(), json!("{\"a\":\"\u{fffd}\"}"));
    assert_eq!(
        h.provider
            .request_count_for_key(bad.idempotency_key.as_str()),
        0
    );
    let sent = h.provider.requests();
    let blob_body = sent
        .iter()
        .find(|r| r.idempotency_key.as_deref() == Some(blob.idempotency_key.as_str()))
        .map(|r| r.body.clone())
        .expect("the BLOB's JSON was sent");
    assert_eq!(&blob_body[..], br#"{"a":1}"#);
}
