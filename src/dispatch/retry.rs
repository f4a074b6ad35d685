//! The retry policy (design rules 6 and 7) as pure functions: [`backoff_delay`] (exponential
//! backoff with full jitter) and [`decide`], which turns one classified attempt plus the
//! intent's history into exactly one [`Decision`]: delivered, retry at a time, failed, or
//! unknown (→ reconciliation).
//!
//! Two questions gate every retry, in this order:
//!
//! 1. **Is a resend safe?** With no ambiguous attempt in the history (only `not_sent` /
//!    `retryable`), always. After an ambiguous attempt: `safe_always` yes;
//!    `idempotent_with_key` only if the retry lands while the provider still remembers the
//!    key (`retry time < first_sent_at + key_retention`); `not_idempotent` never.
//! 2. **Is there budget left?** Fewer than `max_attempts` attempts made, and the retry time
//!    before the deadline (the earlier of `created_at + policy.deadline` and the intent's own).
//!
//! When a retry is not allowed the intent is `failed` if every attempt was a definite
//! refusal, and `unknown` if any attempt was ambiguous (the provider may have acted).
//!
//! The deadline is checked again when a claimed intent is about to be sent
//! ([`decide_before_send`]): a retry may be claimed long after it was planned (a backlog,
//! an outage, a stopped daemon), and an intent may be enqueued with its deadline already
//! past. No attempt starts at or after the deadline.

use std::time::Duration;

use chrono::{DateTime, Utc};
use rand::{Rng, RngExt};

use crate::action::{AttemptClass, RetryPolicy, RetrySafety};
use crate::provider::RetryAfter;

#[cfg(test)]
mod tests;

/// Everything [`decide`] needs about the attempt that just ended and the intent's history.
#[derive(Debug, Clone, Copy)]
pub struct DecisionInput<'a> {
    /// The class of the attempt that just ended (a lease that expired mid-attempt counts
    /// as `ambiguous`).
    pub class: AttemptClass,
    /// The action's declared retry safety.
    pub retry_safety: RetrySafety,
    /// The action's retry budget.
    pub policy: &'a RetryPolicy,
    /// Attempts made so far, this one included.
    pub attempts_made: u32,
    /// Whether an earlier attempt of this intent was ambiguous.
    pub any_ambiguous_before: bool,
    /// When a request with this key may first have reached the provider (this attempt
    /// included, if it may have). `None` falls back to `created_at`, the earliest possible.
    pub first_sent_at: Option<DateTime<Utc>>,
    /// How long the provider remembers an idempotency key.
    pub key_retention: Duration,
    /// When the intent was enqueued.
    pub created_at: DateTime<Utc>,
    /// The intent's own deadline, if the producer set one.
    pub intent_deadline: Option<DateTime<Utc>>,
    /// The provider's `Retry-After`, if any (clamped to `policy.max_retry_after`).
    pub retry_after: Option<RetryAfter>,
    /// The current time.
    pub now: DateTime<Utc>,
}

/// What happens to the intent after an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The provider acted; the intent is done.
    Delivered,
    /// Attempt again, with the same key, no earlier than `at`.
    RetryAt {
        /// When the next attempt becomes due.
        at: DateTime<Utc>,
        /// Why, for the attempt log.
        reason: String,
    },
    /// Terminal failure: the provider definitely did not act.
    Failed {
        /// Why, for operators.
        reason: String,
    },
    /// The outcome cannot be known: the intent goes to reconciliation.
    Unknown {
        /// Why, for operators.
        reason: String,
    },
}

/// Full-jitter backoff: uniform in `[0, min(max_backoff, initial_backoff * 2^(attempts_made - 1))]`.
/// Overflow-safe for any `attempts_made` (0 is treated as 1).
pub fn backoff_delay(policy: &RetryPolicy, attempts_made: u32, rng: &mut impl Rng) -> Duration {
    let doublings = attempts_made.saturating_sub(1);
    let exponential = 2u32
        .checked_pow(doublings)
        .and_then(|factor| policy.initial_backoff.checked_mul(factor))
        .unwrap_or(policy.max_backoff);
    let cap = exponential.min(policy.max_backoff);
    rng.random_range(Duration::ZERO..=cap)
}

/// Decides what follows an attempt (see the module docs for the rules).
pub fn decide(input: &DecisionInput<'_>, rng: &mut impl Rng) -> Decision {
    let ambiguous_history = input.any_ambiguous_before || input.class.is_ambiguous();
    match input.class {
        AttemptClass::Delivered => Decision::Delivered,
        AttemptClass::Rejected if ambiguous_history => Decision::Unknown {
            reason: "rejected after an earlier ambiguous attempt; the first may have acted"
                .to_owned(),
        },
        AttemptClass::Rejected => Decision::Failed {
            reason: "rejected by the provider".to_owned(),
        },
        AttemptClass::NotSent | AttemptClass::Retryable | AttemptClass::Ambiguous => {
            match plan_retry(input, ambiguous_history, rng) {
                Ok((at, reason)) => Decision::RetryAt { at, reason },
                Err(stop) => stop.into_decision(input, ambiguous_history),
            }
        }
    }
}

/// The retry budget's overall deadline: the earlier of `budget_started_at +
/// policy.deadline` and the intent's own deadline (None: neither is set or representable).
/// No retry is scheduled at or after it, and no attempt starts at or after it.
pub fn budget_deadline(
    policy: &RetryPolicy,
    budget_started_at: DateTime<Utc>,
    intent_deadline: Option<DateTime<Utc>>,
) -> Option<DateTime<Utc>> {
    match (add(budget_started_at, policy.deadline), intent_deadline) {
        (Some(policy), Some(intent)) => Some(policy.min(intent)),
        (policy, intent) => policy.or(intent),
    }
}

/// Checked when a claimed intent is about to be sent: once `deadline` (see
/// [`budget_deadline`]) has passed, nothing is sent and the intent ends `failed`, or
/// `unknown` if an earlier attempt was ambiguous (that one may have acted). `None`: the
/// attempt may start.
pub fn decide_before_send(
    deadline: Option<DateTime<Utc>>,
    any_ambiguous_before: bool,
    now: DateTime<Utc>,
) -> Option<Decision> {
    let deadline = deadline.filter(|deadline| now >= *deadline)?;
    let reason = format!(
        "{} (at {}); not sent",
        deadline_reason(any_ambiguous_before),
        deadline.format("%Y-%m-%dT%H:%M:%S%.3fZ")
    );
    Some(if any_ambiguous_before {
        Decision::Unknown { reason }
    } else {
        Decision::Failed { reason }
    })
}

/// What follows a claimed intent that cannot be sent at all (its stored payload is not
/// text, see [`crate::store::PayloadBody`]): `failed`, or `unknown` after an earlier
/// ambiguous attempt, whose effect may stand and which a person must then settle.
pub fn decide_unsendable(any_ambiguous_before: bool, why: &str) -> Decision {
    let reason = format!("{why}; not sent");
    if any_ambiguous_before {
        Decision::Unknown { reason }
    } else {
        Decision::Failed { reason }
    }
}

fn deadline_reason(ambiguous_history: bool) -> String {
    if ambiguous_history {
        "deadline passed after an ambiguous attempt".to_owned()
    } else {
        "deadline passed".to_owned()
    }
}

/// Why a retry is not allowed.
enum Stop {
    NotIdempotentAfterAmbiguous,
    BudgetExhausted,
    DeadlinePassed,
    KeyRetentionExceeded { forgotten_at: DateTime<Utc> },
}

impl Stop {
    fn into_decision(self, input: &DecisionInput<'_>, ambiguous_history: bool) -> Decision {
        let attempts = input.attempts_made;
        if !ambiguous_history {
            let reason = match self {
                Stop::DeadlinePassed => deadline_reason(false),
                _ => format!("retry budget exhausted: {attempts} attempts"),
            };
            return Decision::Failed { reason };
        }
        let reason = match self {
            Stop::NotIdempotentAfterAmbiguous => {
                "not_idempotent action after an ambiguous attempt".to_owned()
            }
            Stop::KeyRetentionExceeded { forgotten_at } => format!(
                "provider key retention would be exceeded (the provider may forget the key at \
                 {}), after an ambiguous attempt",
                forgotten_at.format("%Y-%m-%dT%H:%M:%SZ")
            ),
            Stop::BudgetExhausted => {
                format!("retry budget exhausted after an ambiguous attempt: {attempts} attempts")
            }
            Stop::DeadlinePassed => deadline_reason(true),
        };
        Decision::Unknown { reason }
    }
}

/// The next attempt's time and reason, or why there is none.
fn plan_retry(
    input: &DecisionInput<'_>,
    ambiguous_history: bool,
    rng: &mut impl Rng,
) -> Result<(DateTime<Utc>, String), Stop> {
    let policy = input.policy;
    if ambiguous_history && input.retry_safety == RetrySafety::NotIdempotent {
        return Err(Stop::NotIdempotentAfterAmbiguous);
    }
    if input.attempts_made >= policy.max_attempts {
        return Err(Stop::BudgetExhausted);
    }
    let backoff = backoff_delay(policy, input.attempts_made, rng);
    let requested = input
        .retry_after
        .map(|after| after.delay_from(input.now).min(policy.max_retry_after));
    let delay = backoff.max(requested.unwrap_or(Duration::ZERO));
    let at = add(input.now, delay).ok_or(Stop::DeadlinePassed)?;

    let deadline = budget_deadline(policy, input.created_at, input.intent_deadline);
    if deadline.is_some_and(|deadline| at >= deadline) {
        return Err(Stop::DeadlinePassed);
    }
    if ambiguous_history && input.retry_safety == RetrySafety::IdempotentWithKey {
        let first_sent_at = input.first_sent_at.unwrap_or(input.created_at);
        if let Some(forgotten_at) = add(first_sent_at, input.key_retention) {
            if at >= forgotten_at {
                return Err(Stop::KeyRetentionExceeded { forgotten_at });
            }
        }
    }
    let reason = retry_reason(input, delay, requested.is_some_and(|r| r >= backoff));
    Ok((at, reason))
}

fn retry_reason(input: &DecisionInput<'_>, delay: Duration, retry_after_used: bool) -> String {
    let rounded = Duration::from_millis(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
    let source = if retry_after_used {
        "Retry-After"
    } else {
        "backoff"
    };
    format!(
        "{} attempt; attempt {} of {} in {} ({source})",
        input.class,
        input.attempts_made.saturating_add(1),
        input.policy.max_attempts,
        humantime::format_duration(rounded),
    )
}

/// `at + delay`, or `None` if that is beyond what a timestamp can hold.
fn add(at: DateTime<Utc>, delay: Duration) -> Option<DateTime<Utc>> {
    let delay = chrono::Duration::from_std(delay).ok()?;
    at.checked_add_signed(delay)
}
