//! Why an intent is where it is — above all, why a pending one has not been sent yet — as
//! one pure function, [`why_waiting`], from the intent and the facts the page looked up
//! (the ordering blocker, whether the action is configured, the clock).
//!
//! | intent                                   | reasons, in this order                      |
//! |------------------------------------------|---------------------------------------------|
//! | `in_flight`                              | `InFlight` (lease owner and expiry)          |
//! | `unknown`                                | `InReconciliation`                          |
//! | terminal                                 | `Finished`                                  |
//! | pending, own deadline at or before now   | `DeadlinePassed`                            |
//! | pending, action not configured           | `ActionNotConfigured`                       |
//! | pending, earlier unfinished same key     | `BlockedBy`                                 |
//! | pending, `next_attempt_at` after now     | `NotDueUntil`                               |
//! | pending, none of the above               | `DueNow`                                    |
//!
//! A pending intent may have several reasons at once; all are listed. Provider capacity
//! (paused, rate limited, breaker) is not known here.

use chrono::{DateTime, Utc};

use crate::intent::{IntentId, IntentState};
use crate::store::IntentRow;

/// What the page looked up about an intent besides its row.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WaitFacts<'a> {
    /// The intent.
    pub intent: &'a IntentRow,
    /// The earliest unfinished intent with the same tenant and ordering key before it.
    pub blocker: Option<(IntentId, IntentState)>,
    /// Whether the daemon has the intent's action configured (None: not known here).
    pub action_configured: Option<bool>,
    /// Now.
    pub now: DateTime<Utc>,
}

/// One reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reason {
    /// A dispatcher holds it.
    InFlight {
        /// The lease owner.
        owner: Option<String>,
        /// When the lease expires.
        until: Option<DateTime<Utc>>,
    },
    /// The outcome is unknown; a person or a probe resolves it.
    InReconciliation,
    /// Terminal.
    Finished(IntentState),
    /// The producer's deadline passed: the next claim fails it without sending.
    DeadlinePassed(DateTime<Utc>),
    /// The daemon has no such action, so no dispatcher claims it.
    ActionNotConfigured(String),
    /// An earlier intent with the same ordering key is unfinished.
    BlockedBy {
        /// That intent.
        intent_id: IntentId,
        /// Its state.
        state: IntentState,
    },
    /// Its next attempt is scheduled later (backoff, `Retry-After`, `not_before`).
    NotDueUntil(DateTime<Utc>),
    /// Nothing holds it back: the next claim takes it.
    DueNow,
}

/// Every reason that applies to `facts.intent` (see the module table).
pub(crate) fn why_waiting(facts: &WaitFacts<'_>) -> Vec<Reason> {
    let intent = facts.intent;
    match intent.state {
        IntentState::InFlight => {
            return vec![Reason::InFlight {
                owner: intent.lease_owner.clone(),
                until: intent.lease_expires_at,
            }]
        }
        IntentState::Unknown => return vec![Reason::InReconciliation],
        IntentState::Pending => {}
        other => return vec![Reason::Finished(other)],
    }
    let mut reasons = Vec::new();
    if let Some(deadline) = intent.deadline_at.filter(|d| *d <= facts.now) {
        reasons.push(Reason::DeadlinePassed(deadline));
    }
    if facts.action_configured == Some(false) {
        reasons.push(Reason::ActionNotConfigured(intent.action.to_string()));
    }
    if let Some((intent_id, state)) = facts.blocker {
        reasons.push(Reason::BlockedBy { intent_id, state });
    }
    if intent.next_attempt_at > facts.now {
        reasons.push(Reason::NotDueUntil(intent.next_attempt_at));
    }
    if reasons.is_empty() {
        reasons.push(Reason::DueNow);
    }
    reasons
}

fn time(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

impl Reason {
    /// A stable short code (element ids, tests).
    pub(crate) fn code(&self) -> &'static str {
        match self {
            Reason::InFlight { .. } => "in-flight",
            Reason::InReconciliation => "in-reconciliation",
            Reason::Finished(_) => "finished",
            Reason::DeadlinePassed(_) => "deadline-passed",
            Reason::ActionNotConfigured(_) => "action-not-configured",
            Reason::BlockedBy { .. } => "blocked",
            Reason::NotDueUntil(_) => "not-due",
            Reason::DueNow => "due-now",
        }
    }

    /// The reason as a sentence for people (plain text; the page escapes it).
    pub(crate) fn sentence(&self) -> String {
        match self {
            Reason::InFlight { owner, until } => format!(
                "In flight: dispatcher {} holds its lease until {}; the outcome is recorded when the attempt ends.",
                owner.as_deref().unwrap_or("?"),
                until.map_or_else(|| "?".to_owned(), time)
            ),
            Reason::InReconciliation => "Outcome unknown: it waits in the reconciliation queue for a person or a probe to resolve it.".into(),
            Reason::Finished(state) => format!("Not waiting: it is {state} (final)."),
            Reason::DeadlinePassed(at) => format!(
                "Deadline passed at {}: the next claim fails it without sending.",
                time(*at)
            ),
            Reason::ActionNotConfigured(action) => format!(
                "Action {action:?} is not configured in this daemon, so no dispatcher claims it."
            ),
            Reason::BlockedBy { intent_id, state } => format!(
                "Blocked by intent #{intent_id} ({state}) with the same ordering key: it goes once that one finishes."
            ),
            Reason::NotDueUntil(at) => format!("Not due until {}.", time(*at)),
            Reason::DueNow => "Due now: the next claim takes it.".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intent::{ActionName, IdempotencyKey, OperationId, TenantId};
    use chrono::Duration;
    use serde_json::json;

    fn intent(state: IntentState) -> IntentRow {
        let t = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        IntentRow {
            id: IntentId::new(7),
            tenant: TenantId::parse("acme").unwrap(),
            operation_id: OperationId::parse("op").unwrap(),
            action: ActionName::parse("refund").unwrap(),
            payload_version: 1,
            payload: crate::store::StoredPayload::from_value(&json!({})),
            payload_sha256: "0".repeat(64),
            idempotency_key: IdempotencyKey::parse("obx2_k").unwrap(),
            ordering_key: None,
            state,
            attempt_count: 0,
            ambiguous_attempts: 0,
            first_sent_at: None,
            next_attempt_at: t,
            deadline_at: None,
            lease_owner: None,
            lease_expires_at: None,
            attempt_started_at: None,
            fencing_token: 0,
            provider_ref: None,
            last_error: None,
            last_http_status: None,
            created_at: t,
            updated_at: t,
            finished_at: None,
        }
    }

    fn why(
        intent: &IntentRow,
        blocker: Option<(IntentId, IntentState)>,
        configured: Option<bool>,
        now: DateTime<Utc>,
    ) -> Vec<&'static str> {
        why_waiting(&WaitFacts {
            intent,
            blocker,
            action_configured: configured,
            now,
        })
        .iter()
        .map(Reason::code)
        .collect()
    }

    #[test]
    fn each_row_of_the_table() {
        let base = intent(IntentState::Pending);
        let at = base.next_attempt_at;
        let (before, after) = (at - Duration::seconds(5), at + Duration::seconds(5));
        assert_eq!(why(&base, None, Some(true), after), ["due-now"]);
        assert_eq!(
            why(&base, None, None, at),
            ["due-now"],
            "due at exactly now"
        );
        assert_eq!(why(&base, None, Some(true), before), ["not-due"]);
        assert_eq!(
            why(&base, None, Some(false), after),
            ["action-not-configured"]
        );
        assert_eq!(
            why(
                &base,
                Some((IntentId::new(3), IntentState::Unknown)),
                Some(true),
                after
            ),
            ["blocked"]
        );
        let mut late = base.clone();
        late.deadline_at = Some(at);
        assert_eq!(why(&late, None, Some(true), after), ["deadline-passed"]);
        assert_eq!(
            why(
                &late,
                Some((IntentId::new(3), IntentState::Pending)),
                Some(false),
                at - Duration::seconds(1)
            ),
            ["action-not-configured", "blocked", "not-due"],
            "a deadline in the future is no reason; every other reason is listed"
        );
        assert_eq!(
            why(&intent(IntentState::InFlight), None, None, after),
            ["in-flight"]
        );
        assert_eq!(
            why(&intent(IntentState::Unknown), None, None, after),
            ["in-reconciliation"]
        );
        for state in [
            IntentState::Delivered,
            IntentState::Failed,
            IntentState::Cancelled,
            IntentState::Abandoned,
        ] {
            assert_eq!(
                why(
                    &intent(state),
                    Some((IntentId::new(3), IntentState::Pending)),
                    Some(false),
                    before
                ),
                ["finished"]
            );
        }
    }

    #[test]
    fn sentences_name_the_blocker_and_the_time() {
        let s = Reason::BlockedBy {
            intent_id: IntentId::new(41),
            state: IntentState::Unknown,
        }
        .sentence();
        assert!(s.contains("#41") && s.contains("unknown"), "{s}");
        let at = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        assert!(Reason::NotDueUntil(at)
            .sentence()
            .contains("2023-11-14 22:13:20 UTC"));
    }
}
