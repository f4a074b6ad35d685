//! What an outcome writes, decided once for both backends: each [`OutcomeRecord`] becomes
//! one [`OutcomeRow`] (the intent's new state and due time, the provider reference and
//! error it keeps, whether the attempt counts as ambiguous or as sent, the attempt row's
//! class and duration), and the ids a backend's fenced statement applied become each
//! outcome's [`RecordResult`]. The backends bind the rows (PostgreSQL as column arrays,
//! SQLite as one JSON array) and run the statements.

use chrono::{DateTime, Utc};

use super::{OutcomeRecord, RecordResult, Transition};
use crate::action::AttemptClass;
use crate::intent::IntentId;

/// One outcome as the columns the outcome statements write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OutcomeRow {
    /// The intent.
    pub intent_id: IntentId,
    /// The claim's fencing token (the write applies only under it).
    pub token: i64,
    /// The intent's new state.
    pub state: &'static str,
    /// When it is due again (a retry); `None` keeps `next_attempt_at`.
    pub next_at: Option<DateTime<Utc>>,
    /// The provider reference: the transition's, else the attempt's.
    pub provider_ref: Option<String>,
    /// The error: the transition's reason, else the attempt's error.
    pub error: Option<String>,
    /// The attempt's HTTP status.
    pub http_status: Option<i32>,
    /// 1 when the attempt may have reached the provider without a known outcome.
    pub ambiguous: i32,
    /// When a request with this key was sent (`None` for a `not_sent` attempt).
    pub sent_at: Option<DateTime<Utc>>,
    /// The attempt row's class (`None`: no attempt row, a decision after a takeover).
    pub class: Option<&'static str>,
    /// The attempt's duration in milliseconds.
    pub duration_ms: Option<i64>,
    /// When the attempt started.
    pub attempt_started: Option<DateTime<Utc>>,
}

impl OutcomeRow {
    /// The columns `o` writes.
    pub(crate) fn of(o: &OutcomeRecord) -> Self {
        let (next_at, provider_ref, reason) = match &o.transition {
            Transition::Delivered { provider_ref } => (None, provider_ref.clone(), None),
            Transition::RetryAt { at } => (Some(*at), None, None),
            Transition::Failed { reason } | Transition::Unknown { reason } => {
                (None, None, Some(reason.clone()))
            }
        };
        let attempt = o.attempt.as_ref();
        Self {
            intent_id: o.intent_id,
            token: o.fencing_token,
            state: o.transition.state().as_str(),
            next_at,
            provider_ref: provider_ref.or_else(|| attempt.and_then(|a| a.provider_ref.clone())),
            error: reason.or_else(|| attempt.and_then(|a| a.error.clone())),
            http_status: attempt.and_then(|a| a.http_status).map(i32::from),
            ambiguous: i32::from(attempt.is_some_and(|a| a.class.is_ambiguous())),
            sent_at: attempt
                .filter(|a| a.class != AttemptClass::NotSent)
                .map(|a| a.started_at),
            class: attempt.map(|a| a.class.as_str()),
            duration_ms: attempt.map(|a| i64::try_from(a.duration.as_millis()).unwrap_or(i64::MAX)),
            attempt_started: attempt.map(|a| a.started_at),
        }
    }
}

/// Whether any outcome opens a reconciliation item (becomes `unknown`).
pub(crate) fn opens_items(outcomes: &[OutcomeRecord]) -> bool {
    outcomes
        .iter()
        .any(|o| matches!(o.transition, Transition::Unknown { .. }))
}

/// Each outcome's result, given the ids the fenced write applied to.
pub(crate) fn record_results(
    outcomes: &[OutcomeRecord],
    applied: &[IntentId],
) -> Vec<RecordResult> {
    outcomes
        .iter()
        .map(|o| {
            if applied.contains(&o.intent_id) {
                RecordResult::Recorded
            } else {
                RecordResult::Fenced
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::AttemptRecord;

    fn outcome(transition: Transition, class: AttemptClass) -> OutcomeRecord {
        OutcomeRecord {
            intent_id: IntentId::new(7),
            fencing_token: 3,
            attempt: Some(AttemptRecord {
                class,
                http_status: Some(503),
                error: Some("attempt error".into()),
                provider_ref: Some("attempt-ref".into()),
                duration: std::time::Duration::from_millis(12),
                started_at: DateTime::from_timestamp_millis(1_000).unwrap(),
            }),
            transition,
            now: DateTime::from_timestamp_millis(2_000).unwrap(),
        }
    }

    #[test]
    fn a_transition_reason_wins_over_the_attempt_error() {
        let row = OutcomeRow::of(&outcome(
            Transition::Unknown {
                reason: "no answer".into(),
            },
            AttemptClass::Ambiguous,
        ));
        assert_eq!(row.state, "unknown");
        assert_eq!(row.error.as_deref(), Some("no answer"));
        assert_eq!(row.provider_ref.as_deref(), Some("attempt-ref"));
        assert_eq!(row.ambiguous, 1);
        assert_eq!(row.http_status, Some(503));
        assert_eq!(row.duration_ms, Some(12));
    }

    #[test]
    fn a_not_sent_attempt_sets_no_send_time() {
        let at = DateTime::from_timestamp_millis(5_000).unwrap();
        let row = OutcomeRow::of(&outcome(Transition::RetryAt { at }, AttemptClass::NotSent));
        assert_eq!((row.state, row.next_at), ("pending", Some(at)));
        assert_eq!(row.sent_at, None);
        assert_eq!(row.error.as_deref(), Some("attempt error"));
        assert_eq!(row.class, Some("not_sent"));
    }

    #[test]
    fn outcomes_the_write_did_not_apply_are_fenced() {
        let o = outcome(
            Transition::Delivered { provider_ref: None },
            AttemptClass::Delivered,
        );
        let mut other = o.clone();
        other.intent_id = IntentId::new(8);
        assert_eq!(
            record_results(&[o, other], &[IntentId::new(7)]),
            vec![RecordResult::Recorded, RecordResult::Fenced]
        );
    }
}
