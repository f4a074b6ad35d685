//! Read models on SQLite: status counts, intent and attempt listings.

use chrono::{DateTime, Utc};
use sqlx::sqlite::SqliteRow;
use sqlx::AssertSqlSafe;
use sqlx::{Row, SqlitePool};

use super::{from_ms, ms};
use crate::intent::{
    ActionName, IdempotencyKey, IntentId, IntentState, OperationId, OrderingKey, TenantId,
};
use crate::store::{
    parse_class, parse_state, AttemptRow, IntentFilter, IntentRow, StatusSummary, StoreError,
};

pub(super) const INTENT_COLUMNS: &str = "id, tenant, operation_id, action, payload_version, payload, \
    payload_sha256, idempotency_key, ordering_key, state, attempt_count, ambiguous_attempts, \
    first_sent_at, next_attempt_at, deadline_at, lease_owner, lease_expires_at, attempt_started_at, fencing_token, \
    provider_ref, last_error, last_http_status, created_at, updated_at, finished_at";

fn opt_time(row: &SqliteRow, column: &str) -> Result<Option<DateTime<Utc>>, StoreError> {
    Ok(row.try_get::<Option<i64>, _>(column)?.map(from_ms))
}

pub(super) fn intent_from_row(row: &SqliteRow) -> Result<IntentRow, StoreError> {
    let payload: String = row.try_get("payload")?;
    let state: String = row.try_get("state")?;
    Ok(IntentRow {
        id: row.try_get("id")?,
        tenant: TenantId::from_store(row.try_get("tenant")?),
        operation_id: OperationId::from_store(row.try_get("operation_id")?),
        action: ActionName::from_store(row.try_get("action")?),
        payload_version: row.try_get("payload_version")?,
        payload: serde_json::from_str(&payload)
            .map_err(|e| StoreError::Corrupt(format!("payload is not JSON: {e}")))?,
        payload_sha256: row.try_get("payload_sha256")?,
        idempotency_key: IdempotencyKey::from_store(row.try_get("idempotency_key")?),
        ordering_key: row
            .try_get::<Option<String>, _>("ordering_key")?
            .map(OrderingKey::from_store),
        state: parse_state(&state)?,
        attempt_count: row.try_get("attempt_count")?,
        ambiguous_attempts: row.try_get("ambiguous_attempts")?,
        first_sent_at: opt_time(row, "first_sent_at")?,
        next_attempt_at: from_ms(row.try_get("next_attempt_at")?),
        deadline_at: opt_time(row, "deadline_at")?,
        lease_owner: row.try_get("lease_owner")?,
        lease_expires_at: opt_time(row, "lease_expires_at")?,
        attempt_started_at: opt_time(row, "attempt_started_at")?,
        fencing_token: row.try_get("fencing_token")?,
        provider_ref: row.try_get("provider_ref")?,
        last_error: row.try_get("last_error")?,
        last_http_status: row.try_get("last_http_status")?,
        created_at: from_ms(row.try_get("created_at")?),
        updated_at: from_ms(row.try_get("updated_at")?),
        finished_at: opt_time(row, "finished_at")?,
    })
}

fn attempt_from_row(row: &SqliteRow) -> Result<AttemptRow, StoreError> {
    Ok(AttemptRow {
        id: row.try_get("id")?,
        intent_id: row.try_get("intent_id")?,
        attempt_number: row.try_get("attempt_number")?,
        fencing_token: row.try_get("fencing_token")?,
        owner: row.try_get("owner")?,
        started_at: from_ms(row.try_get("started_at")?),
        ended_at: opt_time(row, "ended_at")?,
        class: parse_class(row.try_get("class")?)?,
        http_status: row.try_get("http_status")?,
        error: row.try_get("error")?,
        provider_ref: row.try_get("provider_ref")?,
        duration_ms: row.try_get("duration_ms")?,
    })
}

pub(super) async fn get_intent(
    pool: &SqlitePool,
    id: IntentId,
) -> Result<Option<IntentRow>, StoreError> {
    let sql = format!("SELECT {INTENT_COLUMNS} FROM outbox_intents WHERE id = ?1");
    let row = sqlx::query(AssertSqlSafe(sql))
        .bind(id)
        .fetch_optional(pool)
        .await?;
    row.as_ref().map(intent_from_row).transpose()
}

pub(super) async fn find_intent(
    pool: &SqlitePool,
    tenant: &TenantId,
    operation_id: &OperationId,
) -> Result<Option<IntentRow>, StoreError> {
    let sql = format!(
        "SELECT {INTENT_COLUMNS} FROM outbox_intents WHERE tenant = ?1 AND operation_id = ?2"
    );
    let row = sqlx::query(AssertSqlSafe(sql))
        .bind(tenant.as_str())
        .bind(operation_id.as_str())
        .fetch_optional(pool)
        .await?;
    row.as_ref().map(intent_from_row).transpose()
}

pub(super) async fn list_intents(
    pool: &SqlitePool,
    f: &IntentFilter,
) -> Result<Vec<IntentRow>, StoreError> {
    let sql = format!(
        "SELECT {INTENT_COLUMNS} FROM outbox_intents \
         WHERE (?1 IS NULL OR tenant IN (SELECT value FROM json_each(?1))) \
           AND (?2 IS NULL OR state = ?2) AND (?3 IS NULL OR action = ?3) \
           AND (?4 IS NULL OR created_at < ?4) AND id > ?5 \
         ORDER BY id LIMIT ?6"
    );
    let tenants = f
        .tenants
        .as_ref()
        .map(|t| serde_json::to_string(t).unwrap_or_else(|_| "[]".into()));
    let rows = sqlx::query(AssertSqlSafe(sql))
        .bind(tenants)
        .bind(f.state.map(IntentState::as_str))
        .bind(f.action.as_deref())
        .bind(f.created_before.map(ms))
        .bind(f.after_id.map_or(0, IntentId::get))
        .bind(i64::from(f.limit.max(1)))
        .fetch_all(pool)
        .await?;
    rows.iter().map(intent_from_row).collect()
}

pub(super) async fn list_attempts(
    pool: &SqlitePool,
    intent_id: IntentId,
) -> Result<Vec<AttemptRow>, StoreError> {
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
    .fetch_all(pool)
    .await?;
    rows.iter().map(attempt_from_row).collect()
}

fn json_list(values: &[String]) -> String {
    serde_json::to_string(values).unwrap_or_else(|_| "[]".into())
}

pub(super) async fn pending_unconfigured_actions(
    pool: &SqlitePool,
    configured: &[String],
) -> Result<Vec<(String, i64)>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT action, count(*) FROM outbox_intents WHERE state = 'pending' \
         AND action NOT IN (SELECT value FROM json_each(?1)) GROUP BY action ORDER BY action",
    )
    .bind(json_list(configured))
    .fetch_all(pool)
    .await?)
}

pub(super) async fn next_due_at(
    pool: &SqlitePool,
    actions: &[String],
) -> Result<Option<DateTime<Utc>>, StoreError> {
    let at: Option<i64> = sqlx::query_scalar(
        "SELECT min(next_attempt_at) FROM outbox_intents WHERE state = 'pending' \
         AND action IN (SELECT value FROM json_each(?1))",
    )
    .bind(json_list(actions))
    .fetch_one(pool)
    .await?;
    Ok(at.map(from_ms))
}

pub(super) async fn status_summary(
    pool: &SqlitePool,
    now: DateTime<Utc>,
) -> Result<StatusSummary, StoreError> {
    let counts: Vec<(String, i64)> =
        sqlx::query_as("SELECT state, count(*) FROM outbox_intents GROUP BY state")
            .fetch_all(pool)
            .await?;
    let oldest_due_at: Option<i64> = sqlx::query_scalar(
        "SELECT min(created_at) FROM (SELECT created_at FROM outbox_intents \
         WHERE state = 'pending' AND next_attempt_at <= ?1 ORDER BY next_attempt_at LIMIT 1000)",
    )
    .bind(ms(now))
    .fetch_one(pool)
    .await?;
    let (open, oldest): (i64, Option<i64>) = sqlx::query_as(
        "SELECT count(*), min(opened_at) FROM outbox_reconciliation_items WHERE resolved_at IS NULL",
    )
    .fetch_one(pool)
    .await?;
    Ok(StatusSummary {
        by_state: IntentState::ALL
            .into_iter()
            .map(|s| {
                let n = counts
                    .iter()
                    .find(|(n, _)| n == s.as_str())
                    .map_or(0, |(_, c)| *c);
                (s, n)
            })
            .collect(),
        oldest_due_at: oldest_due_at.map(from_ms),
        reconciliation_open: open,
        reconciliation_oldest_at: oldest.map(from_ms),
    })
}
