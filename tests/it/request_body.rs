//! The request body is the payload as the dispatcher has always written it, whatever the
//! backend stored: compact JSON, object keys in bytewise order, strings and numbers as
//! stored. A claimed intent keeps only these bytes, not the parsed payload (a payload near
//! the size limit parses to tens of times its size); this pins the bytes to what a
//! provider saw before, so a retry after an upgrade sends the same body under the same key.

use crate::support;

use outboxd::producer::NewIntent;
use serde_json::json;
use support::harness::{Harness, REFUND};
use support::TestDb;

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
    let r = h
        .enqueue(NewIntent::new("acme", "op-body", REFUND, payload))
        .await;
    let step = h.dispatcher.run_once().await.unwrap();
    assert_eq!(step.delivered, 1, "{step:?}");
    let sent = h.provider.requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].idempotency_key.as_deref(),
        Some(r.idempotency_key.as_str())
    );
    assert_eq!(
        std::str::from_utf8(&sent[0].body).unwrap(),
        r#"{"a":{"b":"é\n\"q\"","y":[1,2,3]},"amount":"12.50","mid":10,"zeta":1}"#
    );
}

/// A large payload of the densest shape (a long array of small numbers) goes out whole,
/// byte for byte.
async fn a_large_payload_is_sent_whole(t: &TestDb) {
    let h = Harness::new(t).await;
    let pad = vec![0; 20_000];
    let payload = json!({"pad": pad, "n": 7});
    let r = h
        .enqueue(NewIntent::new("acme", "op-large", REFUND, payload))
        .await;
    let step = h.dispatcher.run_once().await.unwrap();
    assert_eq!(step.delivered, 1, "{step:?}");
    let sent = h.provider.requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].idempotency_key.as_deref(),
        Some(r.idempotency_key.as_str())
    );
    let expected = format!("{{\"n\":7,\"pad\":[{}0]}}", "0,".repeat(19_999));
    assert_eq!(sent[0].body.len(), expected.len());
    assert!(
        sent[0].body == expected.as_bytes(),
        "the body differs from the compact payload"
    );
}

both_backends!(
    the_body_is_the_compact_payload_with_sorted_keys,
    a_large_payload_is_sent_whole
);
