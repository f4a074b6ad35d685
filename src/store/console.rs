//! Values and rules for the operator console (`/review`): the intent search, the audit
//! filter, the dashboard's counts, and the change rules that the dry run, the pages, the
//! API, the CLI and the backends all use: which way an intent is redispatched
//! ([`redispatch_route`]), whether it may be cancelled ([`check_cancel`]), whether a
//! person's redispatch may act twice and was confirmed ([`check_resend`]), what the
//! redispatch records of that confirmation for the dispatcher
//! ([`resend_confirmed_attempt`]), and whether the intent is still the one a dry run showed
//! ([`check_seen`]); and the folds of the dashboard's reads. [`super::changes`] calls the
//! change rules on the row it reads inside the change's transaction; backends only bind
//! and run the SQL.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::{
    parse_class, parse_state, AuditEntryId, IntentRow, ReconciliationItemId, ReviewError,
    StoreError, TenantScope,
};
use crate::action::resend::{resend_risk, ResendPolicies, ResendRisk, SendHistory};
use crate::action::AttemptClass;
use crate::intent::{IntentId, IntentState, InvalidField};

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
    pub before_id: Option<AuditEntryId>,
    /// At most this many.
    pub limit: u32,
}

impl AuditFilter {
    /// Every entry in `scope`, newest first, up to `limit`.
    pub fn all(scope: TenantScope, before_id: Option<AuditEntryId>, limit: u32) -> Self {
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
    pub reconciliation_oldest: Option<(ReconciliationItemId, DateTime<Utc>)>,
}

/// How many due intents the dashboard's oldest-due read looks at (the due index, in order).
pub(crate) const DUE_SCAN: i64 = 1000;

impl ConsoleCounts {
    /// The counts from the dashboard's reads: (action, state name, count) rows, the oldest
    /// due enqueue time, the open items and the oldest open item.
    pub(crate) fn from_rows(
        by_action_state: Vec<(String, String, i64)>,
        oldest_due_at: Option<DateTime<Utc>>,
        reconciliation_open: i64,
        reconciliation_oldest: Option<(ReconciliationItemId, DateTime<Utc>)>,
    ) -> Result<Self, StoreError> {
        Ok(Self {
            by_action_state: by_action_state
                .into_iter()
                .map(|(action, state, n)| Ok((action, parse_state(&state)?, n)))
                .collect::<Result<_, StoreError>>()?,
            oldest_due_at,
            reconciliation_open,
            reconciliation_oldest,
        })
    }
}

/// The attempt ends from (ended at, class name) rows; a row without a class is skipped.
pub(crate) fn attempt_ends(
    rows: impl IntoIterator<Item = (DateTime<Utc>, Option<String>)>,
) -> Result<Vec<AttemptEnd>, StoreError> {
    let mut ends = Vec::new();
    for (ended_at, class) in rows {
        if let Some(class) = parse_class(class)? {
            ends.push(AttemptEnd { ended_at, class });
        }
    }
    Ok(ends)
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
    /// What the resend rule needs, and the person's confirmation.
    pub resend: ResendApproval,
    /// The attempt count a dry run showed (None: no dry run); a different one refuses.
    pub seen_attempt_count: Option<i32>,
}

/// The name of the confirmation every redispatch surface takes (the form checkbox, the
/// JSON field; the CLI's `--confirm-may-act-twice`), and of the field a refusal names.
pub const CONFIRM_FIELD: &str = "confirm_may_act_twice";

/// What a person's redispatch brings for the resend rule ([`crate::action::resend`]).
#[derive(Debug, Clone, Default)]
pub struct ResendApproval {
    /// The configured actions' resend policies; an action missing here counts as one whose
    /// retry safety is unknown (treated as `not_idempotent`).
    pub policies: Arc<ResendPolicies>,
    /// The person confirmed that this resend may make the provider act twice.
    pub confirmed_may_act_twice: bool,
}

/// Whether resending `intent` at `now` may act twice, by the one resend rule.
pub fn resend_risk_of(
    policies: &ResendPolicies,
    intent: &IntentRow,
    now: DateTime<Utc>,
) -> Option<ResendRisk> {
    let history = SendHistory {
        ambiguous_attempts: intent.ambiguous_attempts,
        first_sent_at: intent.first_sent_at,
        created_at: intent.created_at,
    };
    resend_risk(policies.get(intent.action.as_str()), &history, now)
}

/// The resend rule for a person's redispatch of `intent` at `now`: `Ok(None)` when it
/// cannot act twice, `Ok(Some(risk))` when it may and the person confirmed it (the audit
/// entry records the reason), and an error naming [`CONFIRM_FIELD`] with the reason when
/// it may and nobody confirmed.
pub fn check_resend(
    approval: &ResendApproval,
    intent: &IntentRow,
    now: DateTime<Utc>,
) -> Result<Option<ResendRisk>, ReviewError> {
    match resend_risk_of(&approval.policies, intent, now) {
        None => Ok(None),
        Some(risk) if approval.confirmed_may_act_twice => Ok(Some(risk)),
        Some(risk) => Err(ReviewError::Invalid(InvalidField::new(
            CONFIRM_FIELD,
            format!(
                "{}; confirm explicitly to send it anyway; nothing changed",
                risk.explain()
            ),
        ))),
    }
}

/// What a person's redispatch of `intent` records in `resend_confirmed_attempt`: the
/// attempt their confirmation covers, the first one after the redispatch, when they
/// confirmed that it may act twice; `None` (the column cleared) when they did not. The
/// dispatcher's send-time check exempts that attempt, and only that one, from the resend
/// rule, so a surface whose configuration saw no risk (a CLI that believes the provider
/// keeps keys longer) cannot make a daemon that does see one send unconfirmed. Written
/// whether or not the surface's own rule saw a risk: the person said "send it even though
/// it may act twice", and that is what the dispatcher needs to know.
pub fn resend_confirmed_attempt(approval: &ResendApproval, intent: &IntentRow) -> Option<i32> {
    approval
        .confirmed_may_act_twice
        .then(|| intent.attempt_count.saturating_add(1))
}

/// Whether `intent` is still the one a dry run showed (`seen_attempt_count`; `None`: no
/// dry run to compare with).
pub fn check_seen(seen_attempt_count: Option<i32>, intent: &IntentRow) -> Result<(), ReviewError> {
    match seen_attempt_count {
        Some(seen) if seen != intent.attempt_count => Err(ReviewError::WrongState {
            state: intent.state.as_str().to_owned(),
            what: CHANGED_SINCE_DRY_RUN,
        }),
        _ => Ok(()),
    }
}

/// What a line of a bulk change says when its intent moved on after the dry run.
pub const CHANGED_SINCE_DRY_RUN: &str = "changed since the dry run; not applied";

/// How an intent is redispatched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedispatchRoute {
    /// `failed`: [`super::ReviewStore::redispatch_failed`].
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

/// Whether `intent` may go through [`super::ReviewStore::redispatch_failed`]: only a
/// `failed` one (an `unknown` one is redispatched by resolving its reconciliation item),
/// still as the dry run saw it, and confirmed if it may act twice ([`check_resend`]).
/// Returns the confirmed risk, if any, for the audit entry.
pub fn check_failed_redispatch(
    r: &Redispatch,
    intent: &IntentRow,
) -> Result<Option<ResendRisk>, ReviewError> {
    match redispatch_route(intent)? {
        RedispatchRoute::Failed => {}
        RedispatchRoute::Reconciliation => {
            return Err(ReviewError::WrongState {
                state: intent.state.as_str().to_owned(),
                what: "an unknown intent is redispatched by resolving its reconciliation item",
            })
        }
    }
    check_seen(r.seen_attempt_count, intent)?;
    check_resend(&r.resend, intent, r.now)
}

/// What a resolution checks on its (unknown) intent, read inside the resolution's
/// transaction: still as the dry run saw it, and a redispatch confirmed if it may act
/// twice. Returns the confirmed risk, if any, for the audit entry.
pub fn check_resolution_of(
    r: &super::Resolution,
    intent: &IntentRow,
) -> Result<Option<ResendRisk>, ReviewError> {
    check_seen(r.seen_attempt_count, intent)?;
    match r.kind {
        super::ResolutionKind::Redispatch => check_resend(&r.resend, intent, r.now),
        _ => Ok(None),
    }
}

/// The audit details' record of a confirmed risk (`null` when there was none).
pub fn confirmed_risk_detail(risk: Option<ResendRisk>) -> serde_json::Value {
    risk.map_or(serde_json::Value::Null, |r| {
        serde_json::Value::String(r.explain())
    })
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

/// The audit entry of a failed intent's redispatch (the same on both backends).
pub fn failed_redispatch_audit(
    r: &Redispatch,
    before: &IntentRow,
    risk: Option<ResendRisk>,
) -> super::NewAuditEntry {
    super::NewAuditEntry {
        actor: r.actor.clone(),
        action: "intent.redispatch".into(),
        tenant: Some(before.tenant.clone()),
        intent_id: Some(r.intent_id),
        details: serde_json::json!({"from_state": "failed", "attempt_count": before.attempt_count,
            "confirmed_may_act_twice": confirmed_risk_detail(risk)}),
        note: Some(r.note.clone()),
        at: r.now,
    }
}

/// The audit entry of a reconciliation item's resolution (the same on both backends).
pub fn resolution_audit(
    r: &super::Resolution,
    intent: &IntentRow,
    risk: Option<ResendRisk>,
) -> super::NewAuditEntry {
    let provider_ref = match &r.kind {
        super::ResolutionKind::Delivered { provider_ref } => Some(provider_ref),
        _ => None,
    };
    super::NewAuditEntry {
        actor: r.actor.clone(),
        action: "reconciliation.resolve".into(),
        tenant: Some(intent.tenant.clone()),
        intent_id: Some(intent.id),
        details: serde_json::json!({
            "item_id": r.item_id,
            "resolution": r.kind.as_str(),
            "provider_ref": provider_ref,
            "confirmed_may_act_twice": confirmed_risk_detail(risk),
        }),
        note: Some(r.note.clone()),
        at: r.now,
    }
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
