//! Property tests for [`classify`]: total over every status and body, never panics, and
//! every response lands in the class the design's table (rule 6) names for it — the
//! oracle [`designed_class`] is written from the table in the design, not from the code.

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

/// The class the design's table gives a non-2xx response without overrides.
fn designed_class(status: u16, has_retry_after: bool, safety: RetrySafety) -> AttemptClass {
    let keyed = safety == RetrySafety::IdempotentWithKey;
    match status {
        408 | 429 => AttemptClass::Retryable,
        503 if has_retry_after => AttemptClass::Retryable,
        409 if keyed => AttemptClass::Retryable,
        400..=499 => AttemptClass::Rejected,
        // 500, 502, 504, 503 without Retry-After, any other 5xx; 1xx, 3xx; nonsense codes.
        _ => AttemptClass::Ambiguous,
    }
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
        let has_retry_after = retry_after.is_some();
        let got = classify(&observation, &ctx);
        if (200..300).contains(&status) {
            // Delivered, unless a configured reference cannot be read from the body.
            let allowed: &[AttemptClass] = match pointer {
                None => &[AttemptClass::Delivered],
                Some(_) => &[AttemptClass::Delivered, AttemptClass::Ambiguous],
            };
            prop_assert!(allowed.contains(&got.class), "{} → {:?}", status, got);
        } else {
            prop_assert_eq!(got.class, designed_class(status, has_retry_after, safety), "{:?}", got);
        }
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
    fn server_errors_are_ambiguous_unless_503_asks_to_retry_later(
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
        let asks_later = status == 503 && retry_after.is_some();
        let got = classify(&Observation::Response { status, retry_after, body }, &ctx);
        let expected = if asks_later { AttemptClass::Retryable } else { AttemptClass::Ambiguous };
        prop_assert_eq!(got.class, expected, "{:?}", got);
    }
}
