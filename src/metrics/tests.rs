//! Encoding tests: names, labels and values as a scraper sees them.

use std::time::Duration;

use chrono::{TimeZone, Utc};
use serde_json::json;

use super::*;
use crate::action::AttemptClass;
use crate::intent::IntentState;
use crate::store::StatusSummary;

fn intent(attempt_count: i32) -> ClaimedIntent {
    ClaimedIntent {
        id: 7,
        tenant: "acme".into(),
        operation_id: "op-7".into(),
        action: "issue_refund".into(),
        payload: json!({"amount": 1}),
        payload_version: 1,
        idempotency_key: "obx1_k".into(),
        attempt_count,
        ambiguous_attempts: 0,
        fencing_token: 1,
        first_sent_at: None,
        created_at: Utc.timestamp_opt(1_700_000_000, 0).unwrap(),
        deadline_at: None,
        budget_attempt_base: 0,
        budget_started_at: None,
        next_attempt_at: Utc.timestamp_opt(1_700_000_000, 0).unwrap(),
        lease_expires_at: Utc.timestamp_opt(1_700_000_030, 0).unwrap(),
        claimed_at: Utc.timestamp_opt(1_700_000_000, 0).unwrap(),
    }
}

fn attempt(class: AttemptClass, started_after_enqueue_secs: i64) -> AttemptRecord {
    AttemptRecord {
        class,
        http_status: Some(200),
        error: None,
        provider_ref: None,
        duration: Duration::from_millis(30),
        started_at: Utc
            .timestamp_opt(1_700_000_000 + started_after_enqueue_secs, 0)
            .unwrap(),
    }
}

fn line<'a>(text: &'a str, prefix: &str) -> &'a str {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting with {prefix:?} in:\n{text}"))
}

#[test]
fn attempts_latencies_claims_and_expiries_are_encoded() {
    let m = Metrics::new();
    m.observe_attempt(&intent(1), &attempt(AttemptClass::Ambiguous, 2));
    m.observe_attempt(&intent(2), &attempt(AttemptClass::Delivered, 9));
    m.observe_claim(3);
    m.observe_claim(0);
    m.observe_lease_expiries(2);
    let text = m.encode().unwrap();
    let attempts = r#"outboxd_attempts_total{action="issue_refund",class="#;
    assert!(
        text.contains(&format!("{attempts}\"ambiguous\"}} 1")),
        "{text}"
    );
    assert!(
        text.contains(&format!("{attempts}\"delivered\"}} 1")),
        "{text}"
    );
    let count = r#"outboxd_delivery_duration_seconds_count{action="issue_refund"}"#;
    assert_eq!(line(&text, count), format!("{count} 2"));
    // Only the first attempt counts for enqueue-to-first-attempt: 2 seconds.
    let sum = r#"outboxd_enqueue_to_first_attempt_seconds_sum{action="issue_refund"}"#;
    assert_eq!(line(&text, sum), format!("{sum} 2.0"));
    assert_eq!(
        line(&text, "outboxd_claim_batch_size_count"),
        "outboxd_claim_batch_size_count 1"
    );
    assert_eq!(
        line(&text, "outboxd_lease_expiries_total"),
        "outboxd_lease_expiries_total 2"
    );
    assert!(text.ends_with("# EOF\n"));
}

#[test]
fn outbox_gauges_are_set_from_the_summary() {
    let m = Metrics::new();
    let now = Utc.timestamp_opt(1_700_000_100, 0).unwrap();
    let summary = StatusSummary {
        by_state: IntentState::ALL
            .into_iter()
            .map(|s| (s, i64::from(s == IntentState::Pending) * 4))
            .collect(),
        oldest_due_at: Some(Utc.timestamp_opt(1_700_000_040, 0).unwrap()),
        reconciliation_open: 2,
        reconciliation_oldest_at: Some(Utc.timestamp_opt(1_700_000_000, 0).unwrap()),
    };
    m.outbox().set(&summary, now);
    let text = m.encode().unwrap();
    assert!(
        text.contains("outboxd_intents{state=\"pending\"} 4"),
        "{text}"
    );
    assert!(
        text.contains("outboxd_intents{state=\"unknown\"} 0"),
        "{text}"
    );
    assert!(
        text.contains("outboxd_oldest_due_intent_age_seconds 60.0"),
        "{text}"
    );
    assert!(
        text.contains("outboxd_reconciliation_open_items 2"),
        "{text}"
    );
    assert!(
        text.contains("outboxd_reconciliation_oldest_age_seconds 100.0"),
        "{text}"
    );
    let empty = StatusSummary::default();
    m.outbox().set(&empty, now);
    let text = m.encode().unwrap();
    assert!(
        text.contains("outboxd_oldest_due_intent_age_seconds 0.0"),
        "{text}"
    );
}
