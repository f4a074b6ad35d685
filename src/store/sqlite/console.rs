//! The review console's reads on SQLite ([`ConsoleStore`]): dashboard counts, recent
//! attempt ends, the intent search and the ordering blocker of an intent. The folds come
//! from [`crate::store::console`]; this module binds and runs SQL.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::AssertSqlSafe;

use super::rows::{intent_from_row, INTENT_COLUMNS};
use super::{from_ms, ms, scope_json, SqliteStore};
use crate::intent::{IntentId, IntentState};
use crate::store::{
    attempt_ends, parse_state, AttemptEnd, ConsoleCounts, ConsoleStore, IntentRow, IntentSearch,
    ReconciliationItemId, StoreError, TenantScope, DUE_SCAN,
};

// Dialect twin of postgres/console.rs `impl ConsoleStore for PgStore`: each method binds
// the same statements (`?n` for `$n`, `json_each` for `ANY`, ms for timestamptz).
#[async_trait]
impl ConsoleStore for SqliteStore {
    async fn console_counts(
        &self,
        scope: &TenantScope,
        now: DateTime<Utc>,
    ) -> Result<ConsoleCounts, StoreError> {
        let scope = scope_json(scope);
        let rows: Vec<(String, String, i64)> = sqlx::query_as(
            "SELECT action, state, count(*) FROM outbox_intents \
             WHERE (?1 IS NULL OR tenant IN (SELECT value FROM json_each(?1))) \
             GROUP BY action, state ORDER BY action, state",
        )
        .bind(&scope)
        .fetch_all(&self.pool)
        .await?;
        let oldest_due_at: Option<i64> = sqlx::query_scalar(
            "SELECT min(created_at) FROM (SELECT created_at FROM outbox_intents \
             WHERE state = 'pending' AND next_attempt_at <= ?1 \
             AND (?2 IS NULL OR tenant IN (SELECT value FROM json_each(?2))) \
             ORDER BY next_attempt_at LIMIT ?3)",
        )
        .bind(ms(now))
        .bind(&scope)
        .bind(DUE_SCAN)
        .fetch_one(&self.pool)
        .await?;
        let open: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM outbox_reconciliation_items WHERE resolved_at IS NULL \
             AND (?1 IS NULL OR tenant IN (SELECT value FROM json_each(?1)))",
        )
        .bind(&scope)
        .fetch_one(&self.pool)
        .await?;
        let oldest: Option<(ReconciliationItemId, i64)> = sqlx::query_as(
            "SELECT id, opened_at FROM outbox_reconciliation_items WHERE resolved_at IS NULL \
             AND (?1 IS NULL OR tenant IN (SELECT value FROM json_each(?1))) \
             ORDER BY opened_at, id LIMIT 1",
        )
        .bind(&scope)
        .fetch_optional(&self.pool)
        .await?;
        ConsoleCounts::from_rows(
            rows,
            oldest_due_at.map(from_ms),
            open,
            oldest.map(|(id, at)| (id, from_ms(at))),
        )
    }

    async fn recent_attempt_ends(
        &self,
        scope: &TenantScope,
        since: DateTime<Utc>,
        scan_limit: u32,
    ) -> Result<Vec<AttemptEnd>, StoreError> {
        let rows: Vec<(i64, Option<String>)> = sqlx::query_as(
            "SELECT a.ended_at, a.class FROM \
             (SELECT intent_id, ended_at, class FROM outbox_attempts ORDER BY id DESC LIMIT ?3) a \
             JOIN outbox_intents i ON i.id = a.intent_id \
             WHERE a.ended_at >= ?1 AND a.class IS NOT NULL \
             AND (?2 IS NULL OR i.tenant IN (SELECT value FROM json_each(?2)))",
        )
        .bind(ms(since))
        .bind(scope_json(scope))
        .bind(i64::from(scan_limit.max(1)))
        .fetch_all(&self.pool)
        .await?;
        attempt_ends(rows.into_iter().map(|(at, class)| (from_ms(at), class)))
    }

    async fn search_intents(&self, s: &IntentSearch) -> Result<Vec<IntentRow>, StoreError> {
        let sql = format!(
            "SELECT {INTENT_COLUMNS} FROM outbox_intents \
             WHERE (?1 IS NULL OR tenant IN (SELECT value FROM json_each(?1))) \
               AND (?2 IS NULL OR state = ?2) AND (?3 IS NULL OR action = ?3) \
               AND (?4 IS NULL OR created_at >= ?4) AND (?5 IS NULL OR created_at < ?5) \
               AND (?6 IS NULL OR operation_id = ?6 OR idempotency_key = ?6 \
                    OR requested_idempotency_key = ?6) \
               AND (?7 IS NULL OR id < ?7) \
             ORDER BY id DESC LIMIT ?8"
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(scope_json(&s.scope))
            .bind(s.state.map(IntentState::as_str))
            .bind(s.action.as_deref())
            .bind(s.created_from.map(ms))
            .bind(s.created_to.map(ms))
            .bind(s.q.as_deref())
            .bind(s.before_id)
            .bind(i64::from(s.limit.max(1)))
            .fetch(&self.pool);
        crate::store::decode_each(rows, intent_from_row).await
    }

    async fn ordering_blocker(
        &self,
        intent: &IntentRow,
    ) -> Result<Option<(IntentId, IntentState)>, StoreError> {
        let Some(key) = &intent.ordering_key else {
            return Ok(None);
        };
        let row: Option<(IntentId, String)> = sqlx::query_as(
            "SELECT id, state FROM outbox_intents WHERE tenant = ?1 AND ordering_key = ?2 \
             AND id < ?3 AND state IN ('pending', 'in_flight', 'unknown') ORDER BY id LIMIT 1",
        )
        .bind(intent.tenant.as_str())
        .bind(key.as_str())
        .bind(intent.id)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|(id, state)| Ok((id, parse_state(&state)?)))
            .transpose()
    }
}
