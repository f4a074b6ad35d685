//! Bad and hostile input: a property test that the digest sees every change, deeply nested and
//! oversized payloads refused at enqueue, providers that answer with huge or endless bodies
//! or redirects, and secrets that must never reach logs or printed configuration.

use crate::support;

use std::time::Duration;

use outboxd::action::AttemptClass;
use outboxd::digest::payload_digest;
use outboxd::fake_provider::{Fault, FaultRule, Matcher};
use outboxd::intent::{ActionName, IntentState};
use outboxd::{EnqueueError, NewIntent};
use proptest::prelude::*;
use serde_json::{json, Value};
use support::harness::{Harness, NOTIFY, REFUND};
use support::invariants::assert_invariants;
use support::TestDb;

/// Arbitrary JSON values of bounded depth.
fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (-1.0e12f64..1.0e12).prop_map(|f| json!(f)),
        "\\PC{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map("[a-zé😀]{0,6}", inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// The digest; an error fails the case (two errors must never compare equal).
fn digest_of(payload: &Value) -> Result<String, TestCaseError> {
    let action = ActionName::parse("act").unwrap();
    payload_digest(&action, 1, payload)
        .map(|d| d.as_str().to_owned())
        .map_err(|e| TestCaseError::fail(format!("{payload}: {e}")))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    // Spelling (order, whitespace, escapes, number notation) is tested on text in
    // tests/it/digest_properties.rs.

    /// Any change of a value changes the digest.
    #[test]
    fn digest_sees_every_value_change(
        members in prop::collection::btree_map("[a-z]{1,5}", arb_json(), 1..6),
        replacement in arb_json(),
    ) {
        let payload = Value::Object(members.clone().into_iter().collect());
        let (key, old) = members.iter().next().unwrap();
        prop_assume!(old != &replacement);
        let mut changed = payload.clone();
        changed[key] = replacement;
        prop_assert_ne!(digest_of(&payload)?, digest_of(&changed)?);
    }
}

async fn enqueue_error(h: &Harness, intent: NewIntent) -> EnqueueError {
    match &h.db {
        outboxd::store::Database::Postgres(pool) => {
            let mut tx = pool.begin().await.unwrap();
            outboxd::enqueue(&mut tx, intent).await.unwrap_err()
        }
        outboxd::store::Database::Sqlite(pool) => {
            let mut tx = pool.begin().await.unwrap();
            outboxd::enqueue(&mut tx, intent).await.unwrap_err()
        }
    }
}

/// Deeply nested and oversized payloads are refused with an error naming the problem.
async fn hostile_payloads_are_refused(t: &TestDb) {
    let h = Harness::new(t).await;
    let mut deep = json!("bottom");
    for _ in 0..100 {
        deep = json!([deep]);
    }
    let err = enqueue_error(
        &h,
        NewIntent::new("acme", "deep", REFUND, json!({ "d": deep })),
    )
    .await;
    assert!(
        err.to_string().contains("nested more than 32 levels"),
        "{err}"
    );
    let wide: serde_json::Map<String, Value> =
        (0..40_000).map(|i| (format!("k{i}"), json!(i))).collect();
    let err = enqueue_error(
        &h,
        NewIntent::new("acme", "wide", REFUND, Value::Object(wide)),
    )
    .await;
    assert!(err.to_string().contains("the limit is 262144"), "{err}");
    let err = enqueue_error(
        &h,
        NewIntent::new("acme", "nul", REFUND, json!({"s": "a\u{0}b"})),
    )
    .await;
    assert!(err.to_string().contains("NUL"), "{err}");
    assert_eq!(
        support::harness::scalar(&h.db, "SELECT count(*) FROM outbox_intents").await,
        0
    );
    drop(deep);
}

/// An idempotency key that cannot travel as an HTTP header value (non-ASCII) is refused
/// at enqueue with an error naming the field, instead of failing every attempt later.
async fn unsendable_idempotency_keys_are_refused(t: &TestDb) {
    let h = Harness::new(t).await;
    for (i, key) in ["clé-42", "key\u{a0}x", "ключ-1"].into_iter().enumerate() {
        let intent = NewIntent::new("acme", format!("op-{i}"), REFUND, json!({"a": 1}))
            .with_idempotency_key(key);
        let err = enqueue_error(&h, intent).await;
        assert!(
            err.to_string().contains("invalid idempotency_key"),
            "{key:?}: {err}"
        );
    }
    assert_eq!(
        support::harness::scalar(&h.db, "SELECT count(*) FROM outbox_intents").await,
        0
    );
}

/// A provider answering with a huge or endless body is cut off at the size limit; the
/// attempt is classified (ambiguous: it may have acted) and a keyed action is retried.
async fn huge_and_endless_bodies_are_cut_off(t: &TestDb) {
    let h = Harness::new(t).await;
    let huge = h.enqueue_simple("op-huge", REFUND).await;
    let endless = h.enqueue_simple("op-endless", NOTIFY).await;
    let once = |key: &str, fault| FaultRule {
        matcher: Matcher::Key(key.to_owned()),
        fault,
        times: 1,
    };
    h.provider.push_fault(once(
        &huge.idempotency_key,
        Fault::HugeBodyAfterApply(8 * 1024 * 1024),
    ));
    h.provider
        .push_fault(once(&endless.idempotency_key, Fault::EndlessBodyAfterApply));
    let step = tokio::time::timeout(Duration::from_secs(30), h.dispatcher.run_once())
        .await
        .expect("endless body must not hang")
        .unwrap();
    assert_eq!(step.claimed, 2);
    let attempts = h.store.list_attempts(huge.intent_id).await.unwrap();
    assert_eq!(attempts[0].class, Some(AttemptClass::Ambiguous));
    assert_eq!(
        h.intent(endless.intent_id).await.state,
        IntentState::Unknown
    );
    h.make_due().await;
    h.dispatcher.drain().await.unwrap();
    assert_eq!(h.intent(huge.intent_id).await.state, IntentState::Delivered);
    assert_invariants(&h).await;
}

/// Redirects are never followed: one request, to the provider only.
async fn redirects_are_not_followed(t: &TestDb) {
    let h = Harness::new(t).await;
    let r = h.enqueue_simple("op-redirect", NOTIFY).await;
    let target = h.provider.url("/keyed/elsewhere");
    h.provider.push_fault(FaultRule {
        matcher: Matcher::Key(r.idempotency_key.clone()),
        fault: Fault::RedirectWithoutApply(target),
        times: 1,
    });
    h.dispatcher.drain().await.unwrap();
    assert_eq!(
        h.provider.request_count(),
        1,
        "the Location was not requested"
    );
    let attempts = h.store.list_attempts(r.intent_id).await.unwrap();
    assert_eq!(
        (attempts[0].class, attempts[0].http_status),
        (Some(AttemptClass::Ambiguous), Some(302))
    );
}

both_backends!(
    hostile_payloads_are_refused,
    unsendable_idempotency_keys_are_refused,
    huge_and_endless_bodies_are_cut_off,
    redirects_are_not_followed
);
