//! Property tests for [`classify`]: total over every status and body, never panics, and
//! the invariants the dispatcher relies on.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use proptest::prelude::*;

use super::*;

fn any_safety() -> impl Strategy<Value = RetrySafety> {
    prop_oneof![
        Just(RetrySafety::SafeAlways),
        Just(RetrySafety::IdempotentWithKey),
        Just(RetrySafety::NotIdempotent),
    ]
}

fn any_body() -> impl Strategy<Value = ResponseBody> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..256)
            .prop_map(|bytes| ResponseBody::Complete(Bytes::from(bytes))),
        "\\PC{0,64}".prop_map(|text| ResponseBody::Complete(Bytes::from(text))),
        (0usize..1_000_000).prop_map(|limit| ResponseBody::TooLarge { limit }),
        ".{0,32}".prop_map(ResponseBody::ReadFailed),
    ]
}

fn any_retry_after() -> impl Strategy<Value = Option<RetryAfter>> {
    proptest::option::of((0u64..100_000).prop_map(|s| RetryAfter::Delay(Duration::from_secs(s))))
}

fn any_pointer() -> impl Strategy<Value = Option<String>> {
    proptest::option::of(prop_oneof![Just("/id".to_owned()), ".{0,12}"])
}

/// A JSON object with arbitrary extra fields and a valid reference at `/id`.
fn body_with_reference() -> impl Strategy<Value = (Bytes, String)> {
    let reference = prop_oneof![
        "[a-zA-Z0-9_]{1,24}".prop_map(Value::String),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
    ];
    let extra = proptest::collection::btree_map("[a-z]{1,6}", any::<i32>(), 0..4);
    (reference, extra).prop_map(|(reference, extra)| {
        let mut object: serde_json::Map<String, Value> = extra
            .into_iter()
            .map(|(k, v)| (k, Value::from(v)))
            .collect();
        object.insert("id".to_owned(), reference.clone());
        let expected = match reference {
            Value::String(text) => text,
            other => other.to_string(),
        };
        (Bytes::from(Value::Object(object).to_string()), expected)
    })
}

proptest! {
    #[test]
    fn total_and_consistent(
        status in any::<u16>(),
        body in any_body(),
        retry_after in any_retry_after(),
        safety in any_safety(),
        pointer in any_pointer(),
    ) {
        let overrides = BTreeMap::new();
        let ctx = ClassifyContext {
            retry_safety: safety,
            reference_pointer: pointer.as_deref(),
            status_overrides: &overrides,
        };
        let observation = Observation::Response { status, retry_after, body };
        let got = classify(&observation, &ctx);
        prop_assert!(AttemptClass::ALL.contains(&got.class));
        prop_assert_eq!(got.http_status, Some(status));
        prop_assert_eq!(got.error.is_none(), got.class == AttemptClass::Delivered);
        prop_assert!(got.provider_ref.is_none() || got.class == AttemptClass::Delivered);
        prop_assert_ne!(got.class, AttemptClass::NotSent);
        if got.class == AttemptClass::Delivered {
            prop_assert!((200..300).contains(&status));
        }
    }

    #[test]
    fn success_with_a_valid_reference_is_delivered(
        status in 200u16..300,
        (body, expected) in body_with_reference(),
        safety in any_safety(),
        retry_after in any_retry_after(),
    ) {
        let overrides = BTreeMap::new();
        let ctx = ClassifyContext {
            retry_safety: safety,
            reference_pointer: Some("/id"),
            status_overrides: &overrides,
        };
        let body = ResponseBody::Complete(body);
        let got = classify(&Observation::Response { status, retry_after, body }, &ctx);
        prop_assert_eq!(got.class, AttemptClass::Delivered);
        prop_assert_eq!(got.provider_ref, Some(expected));
    }

    #[test]
    fn server_errors_are_never_delivered_or_rejected(
        status in 500u16..600,
        body in any_body(),
        retry_after in any_retry_after(),
        safety in any_safety(),
        pointer in any_pointer(),
    ) {
        let overrides = BTreeMap::new();
        let ctx = ClassifyContext {
            retry_safety: safety,
            reference_pointer: pointer.as_deref(),
            status_overrides: &overrides,
        };
        let got = classify(&Observation::Response { status, retry_after, body }, &ctx);
        prop_assert!(
            matches!(got.class, AttemptClass::Ambiguous | AttemptClass::Retryable),
            "{:?}", got
        );
    }
}
