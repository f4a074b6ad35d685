//! What shows the outbox, on SQLite ([`ReadStore`]): status counts, intents, attempts,
//! reconciliation items, the audit log, tombstones, provider states and the live gauges
//! (one dispatcher per file: no lock, this process computes them). Each method binds and
//! runs its statements; the folds are in `crate::store`.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::AssertSqlSafe;

use super::rows::{
    attempt_from_row, audit_from_row, intent_from_row, item_from_row, tombstone_from_row,
    INTENT_COLUMNS, ITEM_SELECT,
};
use super::{from_ms, ms, scope_json, SqliteStore};
use crate::intent::{IntentId, IntentState, OperationId, TenantId};
use crate::store::{
    AttemptRow, AuditEntry, AuditFilter, GaugeRead, IntentFilter, IntentRow, LiveGauges,
    ProviderStateRow, ReadStore, ReconciliationFilter, ReconciliationItem, ReconciliationItemId,
    StatusSummary, StoreError, TenantScope, Tombstone, LIVE_GAUGES_SQL_SQLITE,
};

/// One stored provider state: owner, provider, in flight, max in flight, rate-limited
/// waits, breaker, breaker open until, paused until, updated at, send window (NULL in a
/// row a daemon of schema 5 or earlier published).
type ProviderStateColumns = (
    String,
    String,
    i64,
    i64,
    i64,
    String,
    Option<i64>,
    Option<i64>,
    i64,
    Option<i64>,
);

// Dialect twin of postgres/reads.rs `impl ReadStore for PgStore`: each method binds the
// same statements (`?n` for `$n`, `json_each` for `ANY`, ms for timestamptz).
#[async_trait]
impl ReadStore for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn status_summary(&self, now: DateTime<Utc>) -> Result<StatusSummary, StoreError> {
        let counts: Vec<(String, i64)> =
            sqlx::query_as("SELECT state, count(*) FROM outbox_intents GROUP BY state")
                .fetch_all(&self.pool)
                .await?;
        let oldest_due_at: Option<i64> = sqlx::query_scalar(
            "SELECT min(created_at) FROM (SELECT created_at FROM outbox_intents \
             WHERE state = 'pending' AND next_attempt_at <= ?1 ORDER BY next_attempt_at LIMIT 1000)",
        )
        .bind(ms(now))
        .fetch_one(&self.pool)
        .await?;
        let (open, oldest): (i64, Option<i64>) = sqlx::query_as(
            "SELECT count(*), min(opened_at) FROM outbox_reconciliation_items WHERE resolved_at IS NULL",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(StatusSummary::from_counts(
            &counts,
            oldest_due_at.map(from_ms),
            open,
            oldest.map(from_ms),
        ))
    }

    async fn list_provider_states(&self) -> Result<Vec<ProviderStateRow>, StoreError> {
        let rows: Vec<ProviderStateColumns> = sqlx::query_as(
            "SELECT owner, provider, in_flight, max_in_flight, rate_limited_waits, breaker, \
             breaker_open_until, paused_until, updated_at, send_window \
             FROM outbox_provider_states ORDER BY provider, owner",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| ProviderStateRow {
                owner: r.0,
                provider: r.1,
                in_flight: r.2,
                max_in_flight: r.3,
                send_window: r.9,
                rate_limited_waits: r.4,
                breaker: r.5,
                breaker_open_until: r.6.map(from_ms),
                paused_until: r.7.map(from_ms),
                updated_at: from_ms(r.8),
            })
            .collect())
    }

    async fn live_gauges(&self, now: DateTime<Utc>) -> Result<GaugeRead, StoreError> {
        let rows: Vec<(String, String, i64, Option<i64>)> = sqlx::query_as(LIVE_GAUGES_SQL_SQLITE)
            .bind(ms(now))
            .fetch_all(&self.pool)
            .await?;
        Ok(GaugeRead::Read(LiveGauges::from_rows(
            rows.into_iter()
                .map(|(kind, action, n, at)| (kind, action, n, at.map(from_ms))),
        )))
    }

    async fn get_intent(&self, id: IntentId) -> Result<Option<IntentRow>, StoreError> {
        let sql = format!("SELECT {INTENT_COLUMNS} FROM outbox_intents WHERE id = ?1");
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(intent_from_row).transpose()
    }

    async fn find_intent(
        &self,
        tenant: &TenantId,
        operation_id: &OperationId,
    ) -> Result<Option<IntentRow>, StoreError> {
        let sql = format!(
            "SELECT {INTENT_COLUMNS} FROM outbox_intents WHERE tenant = ?1 AND operation_id = ?2"
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(tenant.as_str())
            .bind(operation_id.as_str())
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(intent_from_row).transpose()
    }

    async fn list_intents(&self, f: &IntentFilter) -> Result<Vec<IntentRow>, StoreError> {
        let sql = format!(
            "SELECT {INTENT_COLUMNS} FROM outbox_intents \
             WHERE (?1 IS NULL OR tenant IN (SELECT value FROM json_each(?1))) \
               AND (?2 IS NULL OR state = ?2) AND (?3 IS NULL OR action = ?3) \
               AND (?4 IS NULL OR created_at < ?4) AND id > ?5 \
             ORDER BY id LIMIT ?6"
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(f.tenants.as_deref().map(super::json_list))
            .bind(f.state.map(IntentState::as_str))
            .bind(f.action.as_deref())
            .bind(f.created_before.map(ms))
            .bind(f.after_id.map_or(0, IntentId::get))
            .bind(i64::from(f.limit.max(1)))
            .fetch(&self.pool);
        crate::store::decode_each(rows, intent_from_row).await
    }

    async fn list_attempts(&self, intent_id: IntentId) -> Result<Vec<AttemptRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, intent_id, attempt_number, fencing_token, owner, started_at, ended_at, class, \
             http_status, error, provider_ref, duration_ms FROM outbox_attempts \
             WHERE intent_id = ?1 \
             UNION ALL \
             SELECT 0, id, attempt_count, fencing_token, coalesce(lease_owner, ''), \
             attempt_started_at, NULL, NULL, NULL, NULL, NULL, NULL FROM outbox_intents \
             WHERE id = ?1 AND attempt_started_at IS NOT NULL \
             ORDER BY attempt_number, id",
        )
        .bind(intent_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(attempt_from_row).collect()
    }

    async fn open_reconciliation_intents(&self) -> Result<Vec<IntentId>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT intent_id FROM outbox_reconciliation_items WHERE resolved_at IS NULL ORDER BY intent_id",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    async fn list_reconciliation(
        &self,
        f: &ReconciliationFilter,
    ) -> Result<Vec<ReconciliationItem>, StoreError> {
        let sql = format!(
            "{ITEM_SELECT} WHERE (?1 IS NULL OR r.tenant IN (SELECT value FROM json_each(?1))) \
             AND (NOT ?2 OR r.resolved_at IS NULL) AND (?3 IS NULL OR i.action = ?3) \
             AND (?4 IS NULL OR r.opened_at < ?4) AND r.id > ?5 \
             ORDER BY r.opened_at, r.id LIMIT ?6"
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(scope_json(&f.scope))
            .bind(f.open_only)
            .bind(f.action.as_deref())
            .bind(f.opened_before.map(ms))
            .bind(f.after_id.map_or(0, ReconciliationItemId::get))
            .bind(i64::from(f.limit.max(1)))
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(item_from_row).collect()
    }

    async fn get_reconciliation(
        &self,
        id: ReconciliationItemId,
        scope: &TenantScope,
    ) -> Result<Option<ReconciliationItem>, StoreError> {
        let sql = format!(
            "{ITEM_SELECT} WHERE r.id = ?1 AND (?2 IS NULL OR r.tenant IN (SELECT value FROM json_each(?2)))"
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(id)
            .bind(scope_json(scope))
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(item_from_row).transpose()
    }

    async fn reconciliation_for_intent(
        &self,
        intent_id: IntentId,
    ) -> Result<Vec<ReconciliationItem>, StoreError> {
        let sql = format!("{ITEM_SELECT} WHERE r.intent_id = ?1 ORDER BY r.opened_at, r.id");
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(intent_id)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(item_from_row).collect()
    }

    async fn search_audit(&self, f: &AuditFilter) -> Result<Vec<AuditEntry>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, at, actor, action, tenant, intent_id, details, note FROM outbox_audit_log \
             WHERE (?1 IS NULL OR tenant IN (SELECT value FROM json_each(?1))) \
             AND (?2 IS NULL OR id < ?2) AND (?3 IS NULL OR actor = ?3) \
             AND (?4 IS NULL OR action = ?4) AND (?5 IS NULL OR intent_id = ?5) \
             ORDER BY id DESC LIMIT ?6",
        )
        .bind(scope_json(&f.scope))
        .bind(f.before_id)
        .bind(f.actor.as_deref())
        .bind(f.action.as_deref())
        .bind(f.intent_id)
        .bind(i64::from(f.limit.max(1)))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(audit_from_row).collect()
    }

    async fn find_tombstone(
        &self,
        tenant: &TenantId,
        operation_id: &OperationId,
    ) -> Result<Option<Tombstone>, StoreError> {
        let row = sqlx::query(
            "SELECT tenant, operation_id, intent_id, payload_sha256, final_state, provider_ref, pruned_at \
             FROM outbox_tombstones WHERE tenant = ?1 AND operation_id = ?2",
        )
        .bind(tenant.as_str())
        .bind(operation_id.as_str())
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(tombstone_from_row).transpose()
    }
}
