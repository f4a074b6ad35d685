//! The statements of a review change on PostgreSQL ([`ChangeStatements`]), each one
//! statement on the change's transaction; the order and the rules are in
//! [`crate::store::changes`]. The intent a change reads is locked (`FOR UPDATE`) until it
//! commits.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::types::Json;
use sqlx::AssertSqlSafe;
use sqlx::{PgConnection, Postgres, Transaction};

use super::rows::{intent_from_row, INTENT_COLUMNS};
use super::PgStore;
use crate::intent::{IntentId, TenantId};
use crate::store::changes::{ChangeSource, ChangeStatements, ResolvedColumns};
use crate::store::{
    AuditEntryId, IntentRow, NewAuditEntry, ReconciliationItemId, Resolution, ResolutionKind,
    StoreError, TenantScope,
};

/// An open review change on PostgreSQL.
#[derive(Debug)]
pub struct PgChange(Transaction<'static, Postgres>);

#[async_trait]
impl ChangeSource for PgStore {
    type Change = PgChange;

    async fn begin_change(&self) -> Result<PgChange, StoreError> {
        Ok(PgChange(self.pool.begin().await?))
    }
}

// Dialect twin of sqlite/review.rs `impl ChangeStatements for SqliteChange`: binds the
// same statements (`$n` for `?n`, `ANY` for `json_each`, timestamptz for ms, `FOR UPDATE`
// where SQLite's `BEGIN IMMEDIATE` already serialises).
#[async_trait]
impl ChangeStatements for PgChange {
    async fn close_item(&mut self, r: &Resolution) -> Result<Option<IntentId>, StoreError> {
        let provider_ref = match &r.kind {
            ResolutionKind::Delivered { provider_ref } => Some(provider_ref.as_str()),
            _ => None,
        };
        Ok(sqlx::query_scalar(
            "UPDATE outbox_reconciliation_items SET resolution = $2, resolved_by = $3, \
             resolved_at = $4, resolution_note = $5, resolved_provider_ref = $6 \
             WHERE id = $1 AND resolved_at IS NULL AND ($7::text[] IS NULL OR tenant = ANY($7)) \
             RETURNING intent_id",
        )
        .bind(r.item_id)
        .bind(r.kind.as_str())
        .bind(&r.actor)
        .bind(r.now)
        .bind(&r.note)
        .bind(provider_ref)
        .bind(r.scope.as_list())
        .fetch_optional(&mut *self.0)
        .await?)
    }

    async fn item_resolution(
        &mut self,
        item_id: ReconciliationItemId,
        scope: &TenantScope,
    ) -> Result<Option<ResolvedColumns>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT resolution, resolved_by, resolved_at FROM outbox_reconciliation_items \
             WHERE id = $1 AND ($2::text[] IS NULL OR tenant = ANY($2))",
        )
        .bind(item_id)
        .bind(scope.as_list())
        .fetch_optional(&mut *self.0)
        .await?)
    }

    async fn lock_intent(
        &mut self,
        id: IntentId,
        scope: &TenantScope,
    ) -> Result<Option<IntentRow>, StoreError> {
        let sql = format!(
            "SELECT {INTENT_COLUMNS} FROM outbox_intents WHERE id = $1 \
             AND ($2::text[] IS NULL OR tenant = ANY($2)) FOR UPDATE"
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(id)
            .bind(scope.as_list())
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
        let query = match &r.kind {
            ResolutionKind::Delivered { provider_ref } => sqlx::query(
                "UPDATE outbox_intents SET state = 'delivered', provider_ref = $3, \
                 finished_at = $2, updated_at = $2 WHERE id = $1 AND state = 'unknown'",
            )
            .bind(id)
            .bind(r.now)
            .bind(provider_ref),
            ResolutionKind::Redispatch => sqlx::query(
                "UPDATE outbox_intents SET state = 'pending', next_attempt_at = $2, \
                 updated_at = $2, budget_attempt_base = attempt_count, budget_started_at = $2, \
                 resend_confirmed_attempt = $3 WHERE id = $1 AND state = 'unknown'",
            )
            .bind(id)
            .bind(r.now)
            .bind(confirmed_attempt),
            ResolutionKind::Abandoned => sqlx::query(
                "UPDATE outbox_intents SET state = 'abandoned', finished_at = $2, updated_at = $2 \
                 WHERE id = $1 AND state = 'unknown'",
            )
            .bind(id)
            .bind(r.now),
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
            "UPDATE outbox_intents SET state = 'pending', next_attempt_at = $2, updated_at = $2, \
             finished_at = NULL, budget_attempt_base = attempt_count, budget_started_at = $2, \
             resend_confirmed_attempt = $3 WHERE id = $1 AND state = 'failed'",
        )
        .bind(id)
        .bind(now)
        .bind(confirmed_attempt)
        .execute(&mut *self.0)
        .await?;
        Ok(())
    }

    async fn cancel_intent(&mut self, id: IntentId, now: DateTime<Utc>) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE outbox_intents SET state = 'cancelled', finished_at = $2, updated_at = $2 \
             WHERE id = $1 AND state = 'pending'",
        )
        .bind(id)
        .bind(now)
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
            "UPDATE outbox_reconciliation_items SET probe_finding = $2, probe_checked_at = $3, \
             probe_count = probe_count + 1 WHERE id = $1",
        )
        .bind(item_id)
        .bind(finding)
        .bind(now)
        .execute(&mut *self.0)
        .await?;
        Ok(())
    }

    async fn append_audit(&mut self, entry: &NewAuditEntry) -> Result<AuditEntryId, StoreError> {
        append_audit_on(&mut self.0, entry).await
    }

    async fn wake_dispatchers(&mut self) -> Result<(), StoreError> {
        sqlx::query(super::WAKE_DISPATCHERS_SQL)
            .execute(&mut *self.0)
            .await?;
        Ok(())
    }

    async fn commit(self) -> Result<(), StoreError> {
        Ok(self.0.commit().await?)
    }
}

// Dialect twin of sqlite/review.rs append_audit_on: details as jsonb, not text.
/// Appends an audit entry on `conn`, typically inside a caller's transaction so the
/// entry commits (or rolls back) with the change it records.
pub async fn append_audit_on(
    conn: &mut PgConnection,
    e: &NewAuditEntry,
) -> Result<AuditEntryId, StoreError> {
    Ok(sqlx::query_scalar(
        "INSERT INTO outbox_audit_log (at, actor, action, tenant, intent_id, details, note) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
    )
    .bind(e.at)
    .bind(&e.actor)
    .bind(&e.action)
    .bind(e.tenant.as_ref().map(TenantId::as_str))
    .bind(e.intent_id)
    .bind(Json(&e.details))
    .bind(&e.note)
    .fetch_one(conn)
    .await?)
}
