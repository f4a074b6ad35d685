//! Encoding tests: names, labels and values as a scraper sees them.

use std::time::Duration;

use chrono::{TimeZone, Utc};
use serde_json::json;

use super::*;
use crate::action::AttemptClass;
use crate::intent::{ActionName, IdempotencyKey, IntentId, OperationId, TenantId};
use crate::store::{ActionBacklog, LiveGauges};

fn intent(attempt_count: i32) -> ClaimedIntent {
    ClaimedIntent {
        id: IntentId::new(7),
        tenant: TenantId::parse("acme").unwrap(),
        operation_id: OperationId::parse("op-7").unwrap(),
        action: ActionName::parse("issue_refund").unwrap(),
        payload: crate::store::PayloadBody::from_value(&json!({"amount": 1})),
        payload_version: 1,
        idempotency_key: IdempotencyKey::parse("obx1_k").unwrap(),
        attempt_count,
        ambiguous_attempts: 0,
        fencing_token: 1,
        first_sent_at: None,
        created_at: Utc.timestamp_opt(1_700_000_000, 0).unwrap(),
        deadline_at: None,
        budget_attempt_base: 0,
        budget_started_at: None,
        resend_confirmed_attempt: None,
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
    m.observe_attempt(&intent(1), "refunds", &attempt(AttemptClass::Ambiguous, 2));
    m.observe_attempt(&intent(2), "refunds", &attempt(AttemptClass::Delivered, 9));
    m.observe_claim(3);
    m.observe_claim(0);
    m.observe_lease_expiries(2);
    m.observe_claim_given_up();
    let text = m.encode().unwrap();
    assert!(text.contains("outboxd_claims_given_up_total 1"), "{text}");
    let attempts = r#"outboxd_attempts_total{action="issue_refund",provider="refunds",class="#;
    assert!(
        text.contains(&format!("{attempts}\"ambiguous\"}} 1")),
        "{text}"
    );
    assert!(
        text.contains(&format!("{attempts}\"delivered\"}} 1")),
        "{text}"
    );
    let count =
        r#"outboxd_delivery_duration_seconds_count{action="issue_refund",provider="refunds"}"#;
    assert_eq!(line(&text, count), format!("{count} 2"));
    // Only the first attempt counts for enqueue-to-first-attempt: 2 seconds.
    let sum =
        r#"outboxd_enqueue_to_first_attempt_seconds_sum{action="issue_refund",provider="refunds"}"#;
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

fn backlog(action: &str, pending: i64, due_since: Option<i64>, open: i64) -> ActionBacklog {
    ActionBacklog {
        action: action.into(),
        pending,
        oldest_due_at: due_since.map(|s| Utc.timestamp_opt(s, 0).unwrap()),
        in_flight: 1,
        reconciliation_open: open,
        reconciliation_oldest_at: (open > 0).then(|| Utc.timestamp_opt(1_700_000_000, 0).unwrap()),
    }
}

#[test]
fn outbox_gauges_carry_the_action_and_timestamps() {
    let m = Metrics::new();
    let now = Utc.timestamp_opt(1_700_000_100, 0).unwrap();
    let live = LiveGauges {
        actions: vec![
            backlog("issue_refund", 4, Some(1_700_000_040), 2),
            backlog("notify", 1, None, 0),
        ],
    };
    m.outbox().set(&live, now);
    let text = m.encode().unwrap();
    for expected in [
        r#"outboxd_intents{state="pending",action="issue_refund"} 4"#,
        r#"outboxd_intents{state="in_flight",action="issue_refund"} 1"#,
        r#"outboxd_intents{state="unknown",action="issue_refund"} 2"#,
        r#"outboxd_intents{state="pending",action="notify"} 1"#,
        r#"outboxd_oldest_due_timestamp_seconds{action="issue_refund"} 1700000040.0"#,
        r#"outboxd_oldest_due_intent_age_seconds{action="issue_refund"} 60.0"#,
        r#"outboxd_reconciliation_open_items{action="issue_refund"} 2"#,
        r#"outboxd_reconciliation_oldest_timestamp_seconds{action="issue_refund"} 1700000000.0"#,
        r#"outboxd_reconciliation_oldest_age_seconds{action="issue_refund"} 100.0"#,
    ] {
        assert!(text.contains(expected), "{expected} missing in:\n{text}");
    }
    // Nothing is due for notify: no timestamp, no age (not a misleading 0).
    assert!(!text.contains(r#"outboxd_oldest_due_timestamp_seconds{action="notify"}"#));
    // No terminal state is a gauge: finished rows are counters, never counted.
    assert!(!text.contains(r#"state="delivered""#), "{text}");
    // An action whose backlog is gone loses its series.
    m.outbox().set(&LiveGauges::default(), now);
    let text = m.encode().unwrap();
    assert!(!text.contains("outboxd_intents{"), "{text}");
    assert!(
        !text.contains("outboxd_oldest_due_intent_age_seconds{"),
        "{text}"
    );
}

#[test]
fn outcomes_count_terminal_states_by_action_and_provider() {
    use crate::store::{OutcomeRecord, Transition};
    let m = Metrics::new();
    let record = |transition| OutcomeRecord {
        intent_id: IntentId::new(7),
        fencing_token: 1,
        attempt: Some(attempt(AttemptClass::Delivered, 1)),
        transition,
        now: Utc::now(),
    };
    let delivered = record(Transition::Delivered { provider_ref: None });
    m.observe_outcome(&intent(1), "refunds", &delivered);
    m.observe_outcome(&intent(2), "refunds", &delivered);
    let retry = record(Transition::RetryAt { at: Utc::now() });
    m.observe_outcome(&intent(3), "refunds", &retry);
    let unknown = record(Transition::Unknown { reason: "x".into() });
    m.observe_outcome(&intent(4), "refunds", &unknown);
    let text = m.encode().unwrap();
    let prefix =
        r#"outboxd_intents_finished_total{action="issue_refund",provider="refunds",state="#;
    assert!(
        text.contains(&format!("{prefix}\"delivered\"}} 2")),
        "{text}"
    );
    assert!(text.contains(&format!("{prefix}\"unknown\"}} 1")), "{text}");
    assert!(!text.contains(&format!("{prefix}\"pending\"")), "{text}");
    let attempts =
        r#"outboxd_attempts_total{action="issue_refund",provider="refunds",class="delivered"} 4"#;
    assert!(text.contains(attempts), "{text}");
}

#[test]
fn build_info_pool_and_jobs_are_encoded() {
    use crate::metrics::process::JobResult;
    let m = Metrics::new();
    m.process().set_pool(crate::store::PoolStats {
        open: 3,
        idle: 2,
        max: 8,
    });
    m.process().observe_job("retention", JobResult::Failed);
    m.process().observe_job("retention", JobResult::Succeeded);
    m.process().observe_retention_batch(1000, 0);
    m.process().observe_retention_batch(17, 5);
    m.process()
        .set_configured_actions([("issue_refund", "refunds")]);
    let text = m.encode().unwrap();
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        text.contains(&format!(
            "outboxd_build_info{{version=\"{version}\",profile="
        )),
        "{text}"
    );
    assert!(text.contains("outboxd_db_pool_connections 3"), "{text}");
    assert!(
        text.contains(r#"outboxd_action_configured{action="issue_refund",provider="refunds"} 1"#),
        "{text}"
    );
    assert!(
        text.contains("outboxd_db_pool_idle_connections 2"),
        "{text}"
    );
    assert!(text.contains("outboxd_db_pool_max_connections 8"), "{text}");
    assert!(
        text.contains(r#"outboxd_job_failures_total{scheduled_job="retention"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"outboxd_job_last_success_timestamp_seconds{scheduled_job="retention"}"#),
        "{text}"
    );
    assert!(
        text.contains(r#"outboxd_retention_deleted_total{kind="intents"} 1017"#),
        "{text}"
    );
    assert!(
        text.contains(r#"outboxd_retention_deleted_total{kind="tombstones"} 5"#),
        "{text}"
    );
}
