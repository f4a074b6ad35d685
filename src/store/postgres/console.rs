//! The review console's reads on PostgreSQL ([`ConsoleStore`]): dashboard counts, recent
//! attempt ends, the intent search and the ordering blocker of an intent. The folds come
//! from [`crate::store::console`]; this module binds and runs SQL.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::AssertSqlSafe;

use super::rows::{intent_from_row, INTENT_COLUMNS};
use super::PgStore;
use crate::intent::{IntentId, IntentState};
use crate::store::{
    attempt_ends, parse_state, AttemptEnd, ConsoleCounts, ConsoleStore, IntentRow, IntentSearch,
    ReconciliationItemId, StoreError, TenantScope, DUE_SCAN,
};

// Dialect twin of sqlite/console.rs `impl ConsoleStore for SqliteStore`: each method binds
// the same statements (`$n` for `?n`, `ANY` for `json_each`, timestamptz for ms).
#[async_trait]
impl ConsoleStore for PgStore {
    async fn console_counts(
        &self,
        scope: &TenantScope,
        now: DateTime<Utc>,
    ) -> Result<ConsoleCounts, StoreError> {
        let tenants = scope.as_list();
        let rows: Vec<(String, String, i64)> = sqlx::query_as(
            "SELECT action, state, count(*) FROM outbox_intents \
             WHERE ($1::text[] IS NULL OR tenant = ANY($1)) \
             GROUP BY action, state ORDER BY action, state",
        )
        .bind(&tenants)
        .fetch_all(&self.pool)
        .await?;
        let oldest_due_at: Option<DateTime<Utc>> = sqlx::query_scalar(
            "SELECT min(created_at) FROM (SELECT created_at FROM outbox_intents \
             WHERE state = 'pending' AND next_attempt_at <= $1 \
             AND ($2::text[] IS NULL OR tenant = ANY($2)) \
             ORDER BY next_attempt_at LIMIT $3) due",
        )
        .bind(now)
        .bind(&tenants)
        .bind(DUE_SCAN)
        .fetch_one(&self.pool)
        .await?;
        let open: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM outbox_reconciliation_items WHERE resolved_at IS NULL \
             AND ($1::text[] IS NULL OR tenant = ANY($1))",
        )
        .bind(&tenants)
        .fetch_one(&self.pool)
        .await?;
        let oldest: Option<(ReconciliationItemId, DateTime<Utc>)> = sqlx::query_as(
            "SELECT id, opened_at FROM outbox_reconciliation_items WHERE resolved_at IS NULL \
             AND ($1::text[] IS NULL OR tenant = ANY($1)) ORDER BY opened_at, id LIMIT 1",
        )
        .bind(&tenants)
        .fetch_optional(&self.pool)
        .await?;
        ConsoleCounts::from_rows(rows, oldest_due_at, open, oldest)
    }

    async fn recent_attempt_ends(
        &self,
        scope: &TenantScope,
        since: DateTime<Utc>,
        scan_limit: u32,
    ) -> Result<Vec<AttemptEnd>, StoreError> {
        let rows: Vec<(DateTime<Utc>, Option<String>)> = sqlx::query_as(
            "SELECT a.ended_at, a.class FROM \
             (SELECT intent_id, ended_at, class FROM outbox_attempts ORDER BY id DESC LIMIT $3) a \
             JOIN outbox_intents i ON i.id = a.intent_id \
             WHERE a.ended_at >= $1 AND a.class IS NOT NULL \
             AND ($2::text[] IS NULL OR i.tenant = ANY($2))",
        )
        .bind(since)
        .bind(scope.as_list())
        .bind(i64::from(scan_limit.max(1)))
        .fetch_all(&self.pool)
        .await?;
        attempt_ends(rows)
    }

    async fn search_intents(&self, s: &IntentSearch) -> Result<Vec<IntentRow>, StoreError> {
        let sql = format!(
            "SELECT {INTENT_COLUMNS} FROM outbox_intents \
             WHERE ($1::text[] IS NULL OR tenant = ANY($1)) \
               AND ($2::text IS NULL OR state = $2) AND ($3::text IS NULL OR action = $3) \
               AND ($4::timestamptz IS NULL OR created_at >= $4) \
               AND ($5::timestamptz IS NULL OR created_at < $5) \
               AND ($6::text IS NULL OR operation_id = $6 OR idempotency_key = $6 \
                    OR requested_idempotency_key = $6) \
               AND ($7::bigint IS NULL OR id < $7) \
             ORDER BY id DESC LIMIT $8"
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(s.scope.as_list())
            .bind(s.state.map(IntentState::as_str))
            .bind(s.action.as_deref())
            .bind(s.created_from)
            .bind(s.created_to)
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
            "SELECT id, state FROM outbox_intents WHERE tenant = $1 AND ordering_key = $2 \
             AND id < $3 AND state IN ('pending', 'in_flight', 'unknown') ORDER BY id LIMIT 1",
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
