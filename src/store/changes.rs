//! The review changes, decided once for both backends: which statements a resolution,
//! cancel or redispatch runs and in what order, what the rules in [`super::console`] and
//! [`super::review`] are asked on the row read inside the change, what a "no row updated"
//! means, and which audit entry commits with the change. [`ReviewStore`] is implemented
//! here, once, for every store that can open a change ([`ChangeSource`]).
//!
//! The module is private to the crate: a change's single statements skip the rules and the
//! audit entry, so outside the store only [`ReviewStore`] is reachable.
//!
//! A backend only binds and executes: it opens a change (a transaction in which the intent
//! read stays as read until commit: `FOR UPDATE` on PostgreSQL, `BEGIN IMMEDIATE` on
//! SQLite) and runs each [`ChangeStatements`] method as one statement.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{
    check_cancel, check_failed_redispatch, check_note, check_redispatch, check_resolution,
    check_resolution_of, check_seen, failed_redispatch_audit, resend_confirmed_attempt,
    resolution_audit, Cancellation, IntentRow, NewAuditEntry, ReadStore, ReconciliationItem,
    Redispatch, Resolution, ResolutionKind, ReviewError, ReviewStore, StoreError, TenantScope,
};
use super::{AuditEntryId, ReconciliationItemId};
use crate::intent::IntentId;

/// `resolution, resolved_by, resolved_at` of a reconciliation item.
pub type ResolvedColumns = (Option<String>, Option<String>, Option<DateTime<Utc>>);

/// A store that can open a change: a transaction of [`ChangeStatements`].
#[async_trait]
pub trait ChangeSource: ReadStore {
    /// The backend's open change.
    type Change: ChangeStatements + 'static;

    /// Opens a change.
    async fn begin_change(&self) -> Result<Self::Change, StoreError>;
}

/// The statements of a change, one each, on an open transaction. Dropping the change
/// without [`ChangeStatements::commit`] rolls it back.
#[async_trait]
pub trait ChangeStatements: Send + Sized {
    /// Marks the open item `r.item_id` inside `r.scope` resolved as `r` says; its intent,
    /// or `None` when no row was updated (resolved already, outside the scope, or absent).
    async fn close_item(&mut self, r: &Resolution) -> Result<Option<IntentId>, StoreError>;

    /// How an item inside `scope` was resolved (`None`: no such item in scope).
    async fn item_resolution(
        &mut self,
        item_id: ReconciliationItemId,
        scope: &TenantScope,
    ) -> Result<Option<ResolvedColumns>, StoreError>;

    /// The intent inside `scope`, unchanged by others until this change ends.
    async fn lock_intent(
        &mut self,
        id: IntentId,
        scope: &TenantScope,
    ) -> Result<Option<IntentRow>, StoreError>;

    /// Moves the `unknown` intent as the resolution says (a redispatch starts a new budget
    /// and records `confirmed_attempt`); whether a row was updated.
    async fn resolve_intent(
        &mut self,
        id: IntentId,
        r: &Resolution,
        confirmed_attempt: Option<i32>,
    ) -> Result<bool, StoreError>;

    /// Moves the `failed` intent back to `pending` with a new budget, due `now`.
    async fn redispatch_intent(
        &mut self,
        id: IntentId,
        now: DateTime<Utc>,
        confirmed_attempt: Option<i32>,
    ) -> Result<(), StoreError>;

    /// Makes the intent `cancelled` at `now`.
    async fn cancel_intent(&mut self, id: IntentId, now: DateTime<Utc>) -> Result<(), StoreError>;

    /// Records a probe's finding on an item and counts the probe.
    async fn set_probe_finding(
        &mut self,
        item_id: ReconciliationItemId,
        finding: &str,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError>;

    /// Appends an audit entry; its id.
    async fn append_audit(&mut self, entry: &NewAuditEntry) -> Result<AuditEntryId, StoreError>;

    /// Tells the dispatchers that an intent became due (on commit).
    async fn wake_dispatchers(&mut self) -> Result<(), StoreError>;

    /// Commits the change.
    async fn commit(self) -> Result<(), StoreError>;
}

/// Why `close_item` updated no row: someone resolved the item first, or it is not there.
fn not_closed(existing: Option<ResolvedColumns>) -> ReviewError {
    match existing {
        Some((Some(resolution), Some(resolved_by), Some(resolved_at))) => {
            ReviewError::AlreadyResolved {
                resolution,
                resolved_by,
                resolved_at,
            }
        }
        _ => ReviewError::NotFound,
    }
}

/// Reads the intent a change is about, locked, or answers "not found".
async fn locked<C: ChangeStatements>(
    change: &mut C,
    id: IntentId,
    scope: &TenantScope,
) -> Result<IntentRow, ReviewError> {
    change
        .lock_intent(id, scope)
        .await?
        .ok_or(ReviewError::NotFound)
}

#[async_trait]
impl<S: ChangeSource> ReviewStore for S {
    async fn resolve_reconciliation(
        &self,
        r: &Resolution,
    ) -> Result<ReconciliationItem, ReviewError> {
        check_resolution(r)?;
        let mut change = self.begin_change().await?;
        let Some(intent_id) = change.close_item(r).await? else {
            return Err(not_closed(
                change.item_resolution(r.item_id, &r.scope).await?,
            ));
        };
        let intent = locked(&mut change, intent_id, &TenantScope::All).await?;
        let risk = check_resolution_of(r, &intent)?;
        let confirmed_attempt = resend_confirmed_attempt(&r.resend, &intent);
        if !change
            .resolve_intent(intent_id, r, confirmed_attempt)
            .await?
        {
            return Err(ReviewError::WrongState {
                state: intent.state.as_str().to_owned(),
                what: "only an unknown outcome can be resolved",
            });
        }
        if r.kind == ResolutionKind::Redispatch {
            change.wake_dispatchers().await?;
        }
        change
            .append_audit(&resolution_audit(r, &intent, risk))
            .await?;
        change.commit().await?;
        self.get_reconciliation(r.item_id, &TenantScope::All)
            .await?
            .ok_or(ReviewError::NotFound)
    }

    async fn cancel_intent(&self, c: &Cancellation) -> Result<IntentRow, ReviewError> {
        check_note(&c.note)?;
        let mut change = self.begin_change().await?;
        let before = locked(&mut change, c.intent_id, &c.scope).await?;
        check_seen(c.seen_attempt_count, &before)?;
        check_cancel(before.state.as_str(), before.ambiguous_attempts)?;
        change.cancel_intent(c.intent_id, c.now).await?;
        change.append_audit(&cancel_audit(c, &before)).await?;
        let updated = locked(&mut change, c.intent_id, &TenantScope::All).await?;
        change.commit().await?;
        Ok(updated)
    }

    async fn redispatch_failed(&self, r: &Redispatch) -> Result<IntentRow, ReviewError> {
        check_redispatch(r)?;
        let mut change = self.begin_change().await?;
        let before = locked(&mut change, r.intent_id, &r.scope).await?;
        let risk = check_failed_redispatch(r, &before)?;
        let confirmed_attempt = resend_confirmed_attempt(&r.resend, &before);
        change
            .redispatch_intent(r.intent_id, r.now, confirmed_attempt)
            .await?;
        change
            .append_audit(&failed_redispatch_audit(r, &before, risk))
            .await?;
        change.wake_dispatchers().await?;
        let updated = locked(&mut change, r.intent_id, &TenantScope::All).await?;
        change.commit().await?;
        Ok(updated)
    }

    async fn record_probe_finding(
        &self,
        item_id: ReconciliationItemId,
        finding: &str,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let mut change = self.begin_change().await?;
        change.set_probe_finding(item_id, finding, now).await?;
        change.commit().await
    }

    async fn append_audit(&self, entry: &NewAuditEntry) -> Result<AuditEntryId, StoreError> {
        let mut change = self.begin_change().await?;
        let id = change.append_audit(entry).await?;
        change.commit().await?;
        Ok(id)
    }
}

/// The audit entry of a cancellation.
fn cancel_audit(c: &Cancellation, before: &IntentRow) -> NewAuditEntry {
    NewAuditEntry {
        actor: c.actor.clone(),
        action: "intent.cancel".into(),
        tenant: Some(before.tenant.clone()),
        intent_id: Some(c.intent_id),
        details: serde_json::json!({}),
        note: Some(c.note.clone()),
        at: c.now,
    }
}
