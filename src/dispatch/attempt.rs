//! One delivery attempt: send the claimed intent with its idempotency key, classify what
//! happened (one pure function), decide what follows (one pure function), and produce the
//! record to write. No database access here; the caller records the result, fenced.

use std::time::Instant;

use chrono::Utc;
use tracing::{field, info_span, Instrument};

use crate::action::resend::{resend_risk, SendHistory};
use crate::action::AttemptClass;
use crate::dispatch::actions::{render_path, ActionRuntime, PathFields};
use crate::dispatch::retry::{
    budget_deadline, decide, decide_before_send, decide_unsendable, Decision, DecisionInput,
};
use crate::provider::{classify, Classified, ClassifyContext, DeliveryRequest};
use crate::store::{AttemptRecord, ClaimedIntent, OutcomeRecord, Transition};

/// Sends `intent` once and returns the outcome to record.
pub async fn deliver(action: &ActionRuntime, intent: &ClaimedIntent) -> OutcomeRecord {
    let now = Utc::now();
    if let Some(transition) = past_deadline(action, intent, now) {
        return not_sent_now(intent, transition);
    }
    let Some(body) = intent.payload.bytes() else {
        let why = "the stored payload is not UTF-8 text";
        let decision = decide_unsendable(intent.ambiguous_attempts > 0, why);
        if let Some(transition) = not_sent_transition(decision) {
            return not_sent_now(intent, transition);
        }
        unreachable!("an unsendable intent is failed or unknown");
    };
    if let Some(reason) = unsafe_to_send(action, intent, now) {
        return not_sent_now(intent, Transition::Unknown { reason });
    }
    let span = info_span!("attempt", intent_id = intent.id.get(), tenant = %intent.tenant,
        action = %intent.action, attempt = intent.attempt_count, class = field::Empty,
        http_status = field::Empty);
    async {
        let started_at = Utc::now();
        let clock = Instant::now();
        let path = render_path(
            &action.path,
            PathFields {
                tenant: intent.tenant.as_str(),
                operation_id: intent.operation_id.as_str(),
                idempotency_key: intent.idempotency_key.as_str(),
                intent_id: intent.id.get(),
            },
        );
        let request = DeliveryRequest {
            method: action.method.clone(),
            path,
            idempotency_key: intent.idempotency_key.as_str().to_owned(),
            body,
        };
        let observation = action.client.send(&request).await;
        let classified = classify(
            &observation,
            &ClassifyContext {
                retry_safety: action.retry_safety,
                reference_pointer: action.reference_pointer.as_deref(),
                status_overrides: action.client.status_overrides(),
            },
        );
        let span = tracing::Span::current();
        span.record("class", classified.class.as_str());
        if let Some(status) = classified.http_status {
            span.record("http_status", status);
        }
        let record = AttemptRecord {
            class: classified.class,
            http_status: classified.http_status,
            error: classified.error.clone(),
            provider_ref: classified.provider_ref.clone(),
            duration: clock.elapsed(),
            started_at,
        };
        let transition = transition_after(action, intent, &classified, started_at);
        log_outcome(&classified, &transition);
        OutcomeRecord {
            intent_id: intent.id,
            fencing_token: intent.fencing_token,
            attempt: Some(record),
            transition,
            now: Utc::now(),
        }
    }
    .instrument(span)
    .await
}

/// Decides what follows an attempt whose lease expired under another dispatcher: the
/// attempt is ambiguous (it may have reached the provider) and nothing is sent now.
pub fn after_lease_expiry(action: &ActionRuntime, intent: &ClaimedIntent) -> OutcomeRecord {
    let classified = Classified {
        class: AttemptClass::Ambiguous,
        http_status: None,
        provider_ref: None,
        retry_after: None,
        error: Some(crate::store::LEASE_EXPIRED_ERROR.to_owned()),
    };
    let started = intent.first_sent_at.unwrap_or(intent.created_at);
    let mut history = intent.clone();
    // The expired attempt is already counted in `ambiguous_attempts`; judge it as "this one".
    history.ambiguous_attempts -= 1;
    let transition = transition_after(action, &history, &classified, started);
    tracing::warn!(intent_id = intent.id.get(), tenant = %intent.tenant, action = %intent.action,
        ?transition, "lease expired mid-attempt; treated as an ambiguous attempt");
    OutcomeRecord {
        intent_id: intent.id,
        fencing_token: intent.fencing_token,
        attempt: None,
        transition,
        now: Utc::now(),
    }
}

fn transition_after(
    action: &ActionRuntime,
    intent: &ClaimedIntent,
    classified: &Classified,
    started_at: chrono::DateTime<Utc>,
) -> Transition {
    let first_sent_at = match (intent.first_sent_at, classified.class) {
        (Some(at), _) => Some(at),
        (None, AttemptClass::NotSent) => None,
        (None, _) => Some(started_at),
    };
    let input = DecisionInput {
        class: classified.class,
        retry_safety: action.retry_safety,
        policy: &action.policy,
        attempts_made: u32::try_from(intent.attempt_count - intent.budget_attempt_base)
            .unwrap_or(u32::MAX),
        any_ambiguous_before: intent.ambiguous_attempts > 0,
        first_sent_at,
        key_retention: action.key_retention,
        created_at: intent.budget_started_at.unwrap_or(intent.created_at),
        intent_deadline: intent.deadline_at,
        retry_after: classified.retry_after,
        now: Utc::now(),
    };
    match decide(&input, &mut rand::rng()) {
        Decision::Delivered => Transition::Delivered {
            provider_ref: classified.provider_ref.clone(),
        },
        Decision::RetryAt { at, .. } => Transition::RetryAt { at },
        Decision::Failed { reason } => Transition::Failed {
            reason: with_cause(reason, classified),
        },
        Decision::Unknown { reason } => Transition::Unknown {
            reason: with_cause(reason, classified),
        },
    }
}

fn with_cause(reason: String, classified: &Classified) -> String {
    match &classified.error {
        Some(error) => format!("{reason} (last attempt: {error})"),
        None => reason,
    }
}

fn log_outcome(classified: &Classified, transition: &Transition) {
    match transition {
        Transition::Delivered { provider_ref } => {
            tracing::info!(
                provider_ref = provider_ref.as_deref().unwrap_or(""),
                "delivered"
            )
        }
        Transition::RetryAt { at } => tracing::info!(
            next_attempt_at = %at, error = classified.error.as_deref().unwrap_or(""), "will retry"),
        Transition::Failed { reason } => tracing::warn!(%reason, "failed"),
        Transition::Unknown { reason } => {
            tracing::warn!(%reason, "outcome unknown; opened a reconciliation item")
        }
    }
}

/// Re-checks, at send time, what was checked when the retry was scheduled, with the one
/// resend rule ([`resend_risk`]): after an ambiguous attempt an `idempotent_with_key`
/// action is only resent while the provider still remembers the key (the retry may be
/// claimed much later than planned: a backlog, a stopped daemon) and a `not_idempotent`
/// one never. The only exemption is the attempt a person confirmed may act twice, recorded
/// on the intent by their redispatch ([`confirmed_by_a_person`]). This daemon's rule is
/// never re-run for the moment of the redispatch: the surface that redispatched may have
/// judged with another configuration (a CLI that believes keys are kept longer) and asked
/// nobody, so a risk this daemon sees and nobody confirmed is not sent.
fn unsafe_to_send(
    action: &ActionRuntime,
    intent: &ClaimedIntent,
    now: chrono::DateTime<Utc>,
) -> Option<String> {
    let policy = action.resend_policy();
    let history = SendHistory {
        ambiguous_attempts: intent.ambiguous_attempts,
        first_sent_at: intent.first_sent_at,
        created_at: intent.created_at,
    };
    let risk = resend_risk(Some(&policy), &history, now)?;
    (!confirmed_by_a_person(intent)).then(|| risk.not_sent_reason().to_owned())
}

/// Whether this claim is the attempt a person confirmed may act twice: the first attempt of
/// the budget their redispatch started, and the one the redispatch recorded
/// (`resend_confirmed_attempt`). A later attempt of that budget (a retry after the
/// confirmed one) or of a later, unconfirmed redispatch has a higher number, since
/// `attempt_count` only grows, so an old confirmation never covers it.
fn confirmed_by_a_person(intent: &ClaimedIntent) -> bool {
    let first_of_redispatch =
        intent.budget_attempt_base > 0 && intent.attempt_count == intent.budget_attempt_base + 1;
    first_of_redispatch && intent.resend_confirmed_attempt == Some(intent.attempt_count)
}

/// Where an intent goes whose deadline passed before this attempt could start (the rule is
/// [`decide_before_send`]): `failed`, or `unknown` after an earlier ambiguous attempt.
/// `None`: the deadline has not passed.
fn past_deadline(
    action: &ActionRuntime,
    intent: &ClaimedIntent,
    now: chrono::DateTime<Utc>,
) -> Option<Transition> {
    let budget_started_at = intent.budget_started_at.unwrap_or(intent.created_at);
    let deadline = budget_deadline(&action.policy, budget_started_at, intent.deadline_at);
    not_sent_transition(decide_before_send(
        deadline,
        intent.ambiguous_attempts > 0,
        now,
    )?)
}

/// The transition of a decision made before sending: `failed` or `unknown` (`None` for a
/// decision that lets the attempt go ahead).
fn not_sent_transition(decision: Decision) -> Option<Transition> {
    match decision {
        Decision::Failed { reason } => Some(Transition::Failed { reason }),
        Decision::Unknown { reason } => Some(Transition::Unknown { reason }),
        Decision::Delivered | Decision::RetryAt { .. } => None,
    }
}

/// The record of an attempt that was claimed but deliberately not sent (`failed` or
/// `unknown`; the reason is the attempt's error).
fn not_sent_now(intent: &ClaimedIntent, transition: Transition) -> OutcomeRecord {
    let reason = match &transition {
        Transition::Failed { reason } | Transition::Unknown { reason } => reason.clone(),
        Transition::Delivered { .. } | Transition::RetryAt { .. } => String::new(),
    };
    let span = info_span!("attempt", intent_id = intent.id.get(), tenant = %intent.tenant,
        action = %intent.action, attempt = intent.attempt_count, class = "not_sent");
    span.in_scope(|| {
        let classified = Classified {
            class: AttemptClass::NotSent,
            http_status: None,
            provider_ref: None,
            retry_after: None,
            error: Some(reason.clone()),
        };
        log_outcome(&classified, &transition);
    });
    let now = Utc::now();
    OutcomeRecord {
        intent_id: intent.id,
        fencing_token: intent.fencing_token,
        attempt: Some(AttemptRecord {
            class: AttemptClass::NotSent,
            http_status: None,
            error: Some(reason),
            provider_ref: None,
            duration: std::time::Duration::ZERO,
            started_at: now,
        }),
        transition,
        now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intent::{ActionName, IdempotencyKey, IntentId, OperationId, TenantId};

    fn claim(base: i32, attempt: i32, confirmed: Option<i32>) -> ClaimedIntent {
        let at = chrono::DateTime::from_timestamp(1_900_000_000, 0).unwrap();
        ClaimedIntent {
            id: IntentId::new(1),
            tenant: TenantId::parse("acme").unwrap(),
            operation_id: OperationId::parse("op").unwrap(),
            action: ActionName::parse("issue_refund").unwrap(),
            payload: crate::store::PayloadBody::from_value(&serde_json::json!({})),
            payload_version: 1,
            idempotency_key: IdempotencyKey::parse("k").unwrap(),
            attempt_count: attempt,
            ambiguous_attempts: 1,
            fencing_token: 1,
            first_sent_at: Some(at),
            created_at: at,
            deadline_at: None,
            budget_attempt_base: base,
            budget_started_at: (base > 0).then_some(at),
            resend_confirmed_attempt: confirmed,
            next_attempt_at: at,
            lease_expires_at: at,
            claimed_at: at,
        }
    }

    #[test]
    fn only_the_recorded_first_attempt_of_a_redispatch_is_confirmed() {
        for (base, attempt, confirmed, expected, case) in [
            (
                3,
                4,
                Some(4),
                true,
                "the confirmed redispatch's first attempt",
            ),
            (3, 4, None, false, "a redispatch nobody confirmed"),
            (3, 5, Some(4), false, "a retry after the confirmed attempt"),
            (
                5,
                6,
                Some(4),
                false,
                "a later redispatch that did not write the column",
            ),
            (0, 1, Some(1), false, "no redispatch"),
        ] {
            assert_eq!(
                confirmed_by_a_person(&claim(base, attempt, confirmed)),
                expected,
                "{case}"
            );
        }
    }
}
