//! Table-driven tests for [`classify`]: one row per rule of the default table, the
//! reference-pointer cases, and per-provider overrides.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;

use super::*;
use crate::action::AttemptClass::{self, *};
use crate::action::RetrySafety::{self, *};

mod rows;
use rows::{override_rows, status_rows, success_rows, transport_rows};

struct Row {
    name: &'static str,
    observation: Observation,
    safety: RetrySafety,
    pointer: Option<&'static str>,
    overrides: Vec<(u16, AttemptClass)>,
    class: AttemptClass,
    provider_ref: Option<&'static str>,
    error_contains: Option<&'static str>,
}

fn row(name: &'static str, observation: Observation, class: AttemptClass) -> Row {
    Row {
        name,
        observation,
        safety: NotIdempotent,
        pointer: None,
        overrides: Vec::new(),
        class,
        provider_ref: None,
        error_contains: None,
    }
}

impl Row {
    fn safety(mut self, safety: RetrySafety) -> Self {
        self.safety = safety;
        self
    }
    fn pointer(mut self, pointer: &'static str) -> Self {
        self.pointer = Some(pointer);
        self
    }
    fn overriding(mut self, status: u16, class: AttemptClass) -> Self {
        self.overrides.push((status, class));
        self
    }
    fn reference(mut self, reference: &'static str) -> Self {
        self.provider_ref = Some(reference);
        self
    }
    fn error(mut self, fragment: &'static str) -> Self {
        self.error_contains = Some(fragment);
        self
    }
}

fn response(status: u16, body: &'static str) -> Observation {
    Observation::Response {
        status,
        retry_after: None,
        body: ResponseBody::Complete(Bytes::from_static(body.as_bytes())),
    }
}

fn response_with_retry_after(status: u16, seconds: u64) -> Observation {
    Observation::Response {
        status,
        retry_after: Some(RetryAfter::Delay(Duration::from_secs(seconds))),
        body: ResponseBody::Complete(Bytes::new()),
    }
}

fn response_body(status: u16, body: ResponseBody) -> Observation {
    Observation::Response {
        status,
        retry_after: None,
        body,
    }
}

#[test]
fn every_row_of_the_table() {
    let rows = [
        transport_rows(),
        success_rows(),
        status_rows(),
        override_rows(),
    ];
    for row in rows.into_iter().flatten() {
        let overrides: BTreeMap<u16, AttemptClass> = row.overrides.iter().copied().collect();
        let ctx = ClassifyContext {
            retry_safety: row.safety,
            reference_pointer: row.pointer,
            status_overrides: &overrides,
        };
        let got = classify(&row.observation, &ctx);
        let name = row.name;
        assert_eq!(got.class, row.class, "{name}: {got:?}");
        assert_eq!(got.provider_ref.as_deref(), row.provider_ref, "{name}");
        assert_eq!(
            got.error.is_none(),
            got.class == Delivered,
            "{name}: {got:?}"
        );
        if let Some(fragment) = row.error_contains {
            let error = got.error.clone().unwrap_or_default();
            assert!(
                error.contains(fragment),
                "{name}: {error:?} lacks {fragment:?}"
            );
        }
        let expected_status = match &row.observation {
            Observation::Response { status, .. } => Some(*status),
            _ => None,
        };
        assert_eq!(got.http_status, expected_status, "{name}");
    }
}

#[test]
fn retry_after_is_passed_on() {
    let overrides = BTreeMap::new();
    let ctx = ClassifyContext {
        retry_safety: IdempotentWithKey,
        reference_pointer: None,
        status_overrides: &overrides,
    };
    let got = classify(&response_with_retry_after(429, 30), &ctx);
    assert_eq!(
        got.retry_after,
        Some(RetryAfter::Delay(Duration::from_secs(30)))
    );
}

#[test]
fn long_error_bodies_are_cut_short() {
    let overrides = BTreeMap::new();
    let ctx = ClassifyContext {
        retry_safety: NotIdempotent,
        reference_pointer: None,
        status_overrides: &overrides,
    };
    let body: &'static str = Box::leak("x".repeat(10_000).into_boxed_str());
    let error = classify(&response(400, body), &ctx).error.unwrap();
    assert!(error.chars().count() < 200, "{error}");
    assert!(error.ends_with('…'));
}
