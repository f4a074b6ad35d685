//! Values and rules for the operator console (`/review`): the intent search, the audit
//! filter, the dashboard's counts, and the two bulk-change rules that both the dry run and
//! the backends use: which way an intent is redispatched ([`redispatch_route`]) and whether
//! it may be cancelled ([`check_cancel`]). Backends only bind and run the SQL.

use chrono::{DateTime, Utc};

use super::{IntentRow, ReviewError, TenantScope};
use crate::action::AttemptClass;
use crate::intent::{IntentId, IntentState};

/// A page of the intents browser: newest first, keyset-paginated by id.
#[derive(Debug, Clone)]
pub struct IntentSearch {
    /// Tenants the caller may see (already narrowed to a requested tenant).
    pub scope: TenantScope,
    /// Only this action.
    pub action: Option<String>,
    /// Only this state.
    pub state: Option<IntentState>,
    /// Only intents created at or after this instant.
    pub created_from: Option<DateTime<Utc>>,
    /// Only intents created before this instant.
    pub created_to: Option<DateTime<Utc>>,
    /// Exact operation id, stored idempotency key or requested idempotency key.
    pub q: Option<String>,
    /// Only ids below this (the next page).
    pub before_id: Option<IntentId>,
    /// At most this many rows.
    pub limit: u32,
}

/// A page of the audit log: newest first, keyset-paginated by id.
#[derive(Debug, Clone)]
pub struct AuditFilter {
    /// Tenants the caller may see (entries without a tenant only for [`TenantScope::All`]).
    pub scope: TenantScope,
    /// Only entries by this actor.
    pub actor: Option<String>,
    /// Only entries of this action (`intent.cancel`, `reconciliation.resolve`, ...).
    pub action: Option<String>,
    /// Only entries about this intent.
    pub intent_id: Option<IntentId>,
    /// Only ids below this.
    pub before_id: Option<i64>,
    /// At most this many.
    pub limit: u32,
}

impl AuditFilter {
    /// Every entry in `scope`, newest first, up to `limit`.
    pub fn all(scope: TenantScope, before_id: Option<i64>, limit: u32) -> Self {
        Self {
            scope,
            actor: None,
            action: None,
            intent_id: None,
            before_id,
            limit,
        }
    }
}

/// The dashboard's counts for a scope.
#[derive(Debug, Clone, Default)]
pub struct ConsoleCounts {
    /// Intents per (action, state), only pairs with at least one intent.
    pub by_action_state: Vec<(String, IntentState, i64)>,
    /// Enqueue time of the oldest pending intent that is due now.
    pub oldest_due_at: Option<DateTime<Utc>>,
    /// Open reconciliation items.
    pub reconciliation_open: i64,
    /// The oldest open item: its id and when it was opened.
    pub reconciliation_oldest: Option<(i64, DateTime<Utc>)>,
}

/// One attempt that ended, for the dashboard's chart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptEnd {
    /// When it ended.
    pub ended_at: DateTime<Utc>,
    /// Its class.
    pub class: AttemptClass,
}

/// A person's redispatch of a `failed` intent: back to `pending` with a new retry budget
/// and the same idempotency key, with an `intent.redispatch` audit entry.
#[derive(Debug, Clone)]
pub struct Redispatch {
    /// The intent.
    pub intent_id: IntentId,
    /// The caller's tenants; an intent outside them is "not found".
    pub scope: TenantScope,
    /// Who.
    pub actor: String,
    /// Why (required).
    pub note: String,
    /// When.
    pub now: DateTime<Utc>,
}

/// How an intent is redispatched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedispatchRoute {
    /// `failed`: [`super::OutboxStore::redispatch_failed`].
    Failed,
    /// `unknown`: its open reconciliation item is resolved as `redispatch`.
    Reconciliation,
}

/// Which way `intent` can be redispatched, or why it cannot (only `failed` and `unknown`
/// intents can: anything else is still moving or finished for good).
pub fn redispatch_route(intent: &IntentRow) -> Result<RedispatchRoute, ReviewError> {
    match intent.state {
        IntentState::Failed => Ok(RedispatchRoute::Failed),
        IntentState::Unknown => Ok(RedispatchRoute::Reconciliation),
        other => Err(ReviewError::WrongState {
            state: other.as_str().to_owned(),
            what: "only a failed or unknown intent can be redispatched",
        }),
    }
}

/// Whether an intent in `state` with `ambiguous_attempts` may be cancelled: only a pending
/// one none of whose attempts may have reached the provider.
pub fn check_cancel(state: &str, ambiguous_attempts: i32) -> Result<(), ReviewError> {
    if state != IntentState::Pending.as_str() {
        return Err(ReviewError::WrongState {
            state: state.to_owned(),
            what: "only a pending intent can be cancelled",
        });
    }
    if ambiguous_attempts > 0 {
        return Err(ReviewError::WrongState {
            state: state.to_owned(),
            what: "an earlier attempt may have reached the provider, so it cannot be cancelled; \
                   let it finish or resolve it in reconciliation",
        });
    }
    Ok(())
}

/// Whether `intent` may go through [`super::OutboxStore::redispatch_failed`]: only a
/// `failed` one (an `unknown` one is redispatched by resolving its reconciliation item).
pub fn check_failed_redispatch(intent: &IntentRow) -> Result<(), ReviewError> {
    match redispatch_route(intent)? {
        RedispatchRoute::Failed => Ok(()),
        RedispatchRoute::Reconciliation => Err(ReviewError::WrongState {
            state: intent.state.as_str().to_owned(),
            what: "an unknown intent is redispatched by resolving its reconciliation item",
        }),
    }
}

/// Checks a redispatch's required fields.
pub fn check_redispatch(r: &Redispatch) -> Result<(), ReviewError> {
    super::review::check_note(&r.note)?;
    if r.actor.trim().is_empty() {
        return Err(ReviewError::Invalid(crate::intent::InvalidField::new(
            "actor",
            "the actor is required",
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_pending_intents_without_ambiguous_attempts_cancel() {
        assert!(check_cancel("pending", 0).is_ok());
        for (state, ambiguous) in [("pending", 1), ("failed", 0), ("in_flight", 0)] {
            assert!(
                matches!(
                    check_cancel(state, ambiguous),
                    Err(ReviewError::WrongState { .. })
                ),
                "{state} {ambiguous}"
            );
        }
    }
}
