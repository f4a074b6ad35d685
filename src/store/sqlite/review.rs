//! The statements of a review change on SQLite ([`ChangeStatements`]), each one statement
//! on the change's transaction; the order and the rules are in [`crate::store::changes`].
//! A change runs in one `BEGIN IMMEDIATE` transaction, so concurrent changes are
//! serialised and what it reads stays as read until it commits.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::AssertSqlSafe;
use sqlx::{Sqlite, SqliteConnection, Transaction};

use super::rows::{intent_from_row, INTENT_COLUMNS};
use super::{from_ms, ms, scope_json, SqliteStore};
use crate::intent::{IntentId, TenantId};
use crate::store::changes::{ChangeSource, ChangeStatements, ResolvedColumns};
use crate::store::{
    AuditEntryId, IntentRow, NewAuditEntry, ReconciliationItemId, Resolution, ResolutionKind,
    StoreError, TenantScope,
};

/// An open review change on SQLite.
#[derive(Debug)]
pub struct SqliteChange(Transaction<'static, Sqlite>);

#[async_trait]
impl ChangeSource for SqliteStore {
    type Change = SqliteChange;

    async fn begin_change(&self) -> Result<SqliteChange, StoreError> {
        Ok(SqliteChange(self.pool.begin_with("BEGIN IMMEDIATE").await?))
    }
}

// Dialect twin of postgres/review.rs `impl ChangeStatements for PgChange`: binds the same
// statements (`?n` for `$n`, `json_each` for `ANY`, ms for timestamptz; no `FOR UPDATE`,
// `BEGIN IMMEDIATE` serialises).
#[async_trait]
impl ChangeStatements for SqliteChange {
    async fn close_item(&mut self, r: &Resolution) -> Result<Option<IntentId>, StoreError> {
        let provider_ref = match &r.kind {
            ResolutionKind::Delivered { provider_ref } => Some(provider_ref.as_str()),
            _ => None,
        };
        Ok(sqlx::query_scalar(
            "UPDATE outbox_reconciliation_items SET resolution = ?2, resolved_by = ?3, \
             resolved_at = ?4, resolution_note = ?5, resolved_provider_ref = ?6 \
             WHERE id = ?1 AND resolved_at IS NULL \
             AND (?7 IS NULL OR tenant IN (SELECT value FROM json_each(?7))) RETURNING intent_id",
        )
        .bind(r.item_id)
        .bind(r.kind.as_str())
        .bind(&r.actor)
        .bind(ms(r.now))
        .bind(&r.note)
        .bind(provider_ref)
        .bind(scope_json(&r.scope))
        .fetch_optional(&mut *self.0)
        .await?)
    }

    async fn item_resolution(
        &mut self,
        item_id: ReconciliationItemId,
        scope: &TenantScope,
    ) -> Result<Option<ResolvedColumns>, StoreError> {
        let row: Option<(Option<String>, Option<String>, Option<i64>)> = sqlx::query_as(
            "SELECT resolution, resolved_by, resolved_at FROM outbox_reconciliation_items \
             WHERE id = ?1 AND (?2 IS NULL OR tenant IN (SELECT value FROM json_each(?2)))",
        )
        .bind(item_id)
        .bind(scope_json(scope))
        .fetch_optional(&mut *self.0)
        .await?;
        Ok(row.map(|(resolution, by, at)| (resolution, by, at.map(from_ms))))
    }

    async fn lock_intent(
        &mut self,
        id: IntentId,
        scope: &TenantScope,
    ) -> Result<Option<IntentRow>, StoreError> {
        let sql = format!(
            "SELECT {INTENT_COLUMNS} FROM outbox_intents WHERE id = ?1 \
             AND (?2 IS NULL OR tenant IN (SELECT value FROM json_each(?2)))"
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(id)
            .bind(scope_json(scope))
            .fetch_optional(&mut *self.0)
            .await?;
        row.as_ref().map(intent_from_row).transpose()
    }

    async fn resolve_intent(
        &mut self,
        id: IntentId,
        r: &Resolution,
        confirmed_attempt: Option<i32>,
    ) -> Result<bool, StoreError> {
        let now = ms(r.now);
        let query = match &r.kind {
            ResolutionKind::Delivered { provider_ref } => sqlx::query(
                "UPDATE outbox_intents SET state = 'delivered', provider_ref = ?3, \
                 finished_at = ?2, updated_at = ?2 WHERE id = ?1 AND state = 'unknown'",
            )
            .bind(id)
            .bind(now)
            .bind(provider_ref),
            ResolutionKind::Redispatch => sqlx::query(
                "UPDATE outbox_intents SET state = 'pending', next_attempt_at = ?2, \
                 updated_at = ?2, budget_attempt_base = attempt_count, budget_started_at = ?2, \
                 resend_confirmed_attempt = ?3 WHERE id = ?1 AND state = 'unknown'",
            )
            .bind(id)
            .bind(now)
            .bind(confirmed_attempt),
            ResolutionKind::Abandoned => sqlx::query(
                "UPDATE outbox_intents SET state = 'abandoned', finished_at = ?2, updated_at = ?2 \
                 WHERE id = ?1 AND state = 'unknown'",
            )
            .bind(id)
            .bind(now),
        };
        Ok(query.execute(&mut *self.0).await?.rows_affected() == 1)
    }

    async fn redispatch_intent(
        &mut self,
        id: IntentId,
        now: DateTime<Utc>,
        confirmed_attempt: Option<i32>,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE outbox_intents SET state = 'pending', next_attempt_at = ?2, updated_at = ?2, \
             finished_at = NULL, budget_attempt_base = attempt_count, budget_started_at = ?2, \
             resend_confirmed_attempt = ?3 WHERE id = ?1 AND state = 'failed'",
        )
        .bind(id)
        .bind(ms(now))
        .bind(confirmed_attempt)
        .execute(&mut *self.0)
        .await?;
        Ok(())
    }

    async fn cancel_intent(&mut self, id: IntentId, now: DateTime<Utc>) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE outbox_intents SET state = 'cancelled', finished_at = ?2, updated_at = ?2 \
             WHERE id = ?1 AND state = 'pending'",
        )
        .bind(id)
        .bind(ms(now))
        .execute(&mut *self.0)
        .await?;
        Ok(())
    }

    async fn set_probe_finding(
        &mut self,
        item_id: ReconciliationItemId,
        finding: &str,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE outbox_reconciliation_items SET probe_finding = ?2, probe_checked_at = ?3, \
             probe_count = probe_count + 1 WHERE id = ?1",
        )
        .bind(item_id)
        .bind(finding)
        .bind(ms(now))
        .execute(&mut *self.0)
        .await?;
        Ok(())
    }

    async fn append_audit(&mut self, entry: &NewAuditEntry) -> Result<AuditEntryId, StoreError> {
        append_audit_on(&mut self.0, entry).await
    }

    // Nothing to send: a SQLite dispatcher is woken in its own process, or polls.
    async fn wake_dispatchers(&mut self) -> Result<(), StoreError> {
        Ok(())
    }

    async fn commit(self) -> Result<(), StoreError> {
        Ok(self.0.commit().await?)
    }
}

// Dialect twin of postgres/review.rs append_audit_on: details as text, times as ms.
/// Appends an audit entry on `conn`, typically inside a caller's transaction so the
/// entry commits (or rolls back) with the change it records.
pub async fn append_audit_on(
    conn: &mut SqliteConnection,
    e: &NewAuditEntry,
) -> Result<AuditEntryId, StoreError> {
    Ok(sqlx::query_scalar(
        "INSERT INTO outbox_audit_log (at, actor, action, tenant, intent_id, details, note) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) RETURNING id",
    )
    .bind(ms(e.at))
    .bind(&e.actor)
    .bind(&e.action)
    .bind(e.tenant.as_ref().map(TenantId::as_str))
    .bind(e.intent_id)
    .bind(e.details.to_string())
    .bind(&e.note)
    .fetch_one(conn)
    .await?)
}
