//! Read models on PostgreSQL: status counts, intent and attempt listings.

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::types::Json;
use sqlx::AssertSqlSafe;
use sqlx::{PgPool, Row};

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

pub(super) fn intent_from_row(row: &PgRow) -> Result<IntentRow, StoreError> {
    let payload: Json<serde_json::Value> = row.try_get("payload")?;
    let state: String = row.try_get("state")?;
    Ok(IntentRow {
        id: row.try_get("id")?,
        tenant: TenantId::from_store(row.try_get("tenant")?),
        operation_id: OperationId::from_store(row.try_get("operation_id")?),
        action: ActionName::from_store(row.try_get("action")?),
        payload_version: row.try_get("payload_version")?,
        payload: payload.0,
        payload_sha256: row.try_get("payload_sha256")?,
        idempotency_key: IdempotencyKey::from_store(row.try_get("idempotency_key")?),
        ordering_key: row
            .try_get::<Option<String>, _>("ordering_key")?
            .map(OrderingKey::from_store),
        state: parse_state(&state)?,
        attempt_count: row.try_get("attempt_count")?,
        ambiguous_attempts: row.try_get("ambiguous_attempts")?,
        first_sent_at: row.try_get("first_sent_at")?,
        next_attempt_at: row.try_get("next_attempt_at")?,
        deadline_at: row.try_get("deadline_at")?,
        lease_owner: row.try_get("lease_owner")?,
        lease_expires_at: row.try_get("lease_expires_at")?,
        attempt_started_at: row.try_get("attempt_started_at")?,
        fencing_token: row.try_get("fencing_token")?,
        provider_ref: row.try_get("provider_ref")?,
        last_error: row.try_get("last_error")?,
        last_http_status: row.try_get("last_http_status")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        finished_at: row.try_get("finished_at")?,
    })
}

fn attempt_from_row(row: &PgRow) -> Result<AttemptRow, StoreError> {
    Ok(AttemptRow {
        id: row.try_get("id")?,
        intent_id: row.try_get("intent_id")?,
        attempt_number: row.try_get("attempt_number")?,
        fencing_token: row.try_get("fencing_token")?,
        owner: row.try_get("owner")?,
        started_at: row.try_get("started_at")?,
        ended_at: row.try_get("ended_at")?,
        class: parse_class(row.try_get("class")?)?,
        http_status: row.try_get("http_status")?,
        error: row.try_get("error")?,
        provider_ref: row.try_get("provider_ref")?,
        duration_ms: row.try_get("duration_ms")?,
    })
}

pub(super) async fn get_intent(
    pool: &PgPool,
    id: IntentId,
) -> Result<Option<IntentRow>, StoreError> {
    let sql = format!("SELECT {INTENT_COLUMNS} FROM outbox_intents WHERE id = $1");
    let row = sqlx::query(AssertSqlSafe(sql))
        .bind(id)
        .fetch_optional(pool)
        .await?;
    row.as_ref().map(intent_from_row).transpose()
}

pub(super) async fn find_intent(
    pool: &PgPool,
    tenant: &TenantId,
    operation_id: &OperationId,
) -> Result<Option<IntentRow>, StoreError> {
    let sql = format!(
        "SELECT {INTENT_COLUMNS} FROM outbox_intents WHERE tenant = $1 AND operation_id = $2"
    );
    let row = sqlx::query(AssertSqlSafe(sql))
        .bind(tenant.as_str())
        .bind(operation_id.as_str())
        .fetch_optional(pool)
        .await?;
    row.as_ref().map(intent_from_row).transpose()
}

pub(super) async fn list_intents(
    pool: &PgPool,
    f: &IntentFilter,
) -> Result<Vec<IntentRow>, StoreError> {
    let sql = format!(
        "SELECT {INTENT_COLUMNS} FROM outbox_intents \
         WHERE ($1::text[] IS NULL OR tenant = ANY($1)) AND ($2::text IS NULL OR state = $2) \
           AND ($3::text IS NULL OR action = $3) AND ($4::timestamptz IS NULL OR created_at < $4) \
           AND id > $5 \
         ORDER BY id LIMIT $6"
    );
    let rows = sqlx::query(AssertSqlSafe(sql))
        .bind(f.tenants.as_ref())
        .bind(f.state.map(IntentState::as_str))
        .bind(f.action.as_deref())
        .bind(f.created_before)
        .bind(f.after_id.map_or(0, IntentId::get))
        .bind(i64::from(f.limit.max(1)))
        .fetch_all(pool)
        .await?;
    rows.iter().map(intent_from_row).collect()
}

pub(super) async fn list_attempts(
    pool: &PgPool,
    intent_id: IntentId,
) -> Result<Vec<AttemptRow>, StoreError> {
    let rows = sqlx::query(
        "SELECT id, intent_id, attempt_number, fencing_token, owner, started_at, ended_at, class, \
         http_status, error, provider_ref, duration_ms FROM outbox_attempts \
         WHERE intent_id = $1 \
         UNION ALL \
         SELECT 0, id, attempt_count, fencing_token, coalesce(lease_owner, ''), \
         attempt_started_at, NULL, NULL, NULL, NULL, NULL, NULL FROM outbox_intents \
         WHERE id = $1 AND attempt_started_at IS NOT NULL \
         ORDER BY attempt_number, id",
    )
    .bind(intent_id)
    .fetch_all(pool)
    .await?;
    rows.iter().map(attempt_from_row).collect()
}

pub(super) async fn pending_unconfigured_actions(
    pool: &PgPool,
    configured: &[String],
) -> Result<Vec<(String, i64)>, StoreError> {
    Ok(sqlx::query_as(
        "SELECT action, count(*) FROM outbox_intents \
         WHERE state = 'pending' AND NOT (action = ANY($1)) GROUP BY action ORDER BY action",
    )
    .bind(configured)
    .fetch_all(pool)
    .await?)
}

pub(super) async fn next_due_at(
    pool: &PgPool,
    actions: &[String],
) -> Result<Option<DateTime<Utc>>, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT min(next_attempt_at) FROM outbox_intents WHERE state = 'pending' AND action = ANY($1)",
    )
    .bind(actions)
    .fetch_one(pool)
    .await?)
}

pub(super) async fn status_summary(
    pool: &PgPool,
    now: DateTime<Utc>,
) -> Result<StatusSummary, StoreError> {
    let counts: Vec<(String, i64)> =
        sqlx::query_as("SELECT state, count(*) FROM outbox_intents GROUP BY state")
            .fetch_all(pool)
            .await?;
    let oldest_due_at: Option<DateTime<Utc>> = sqlx::query_scalar(
        "SELECT min(created_at) FROM (SELECT created_at FROM outbox_intents \
         WHERE state = 'pending' AND next_attempt_at <= $1 ORDER BY next_attempt_at LIMIT 1000) d",
    )
    .bind(now)
    .fetch_one(pool)
    .await?;
    let (open, oldest): (i64, Option<DateTime<Utc>>) = sqlx::query_as(
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
        oldest_due_at,
        reconciliation_open: open,
        reconciliation_oldest_at: oldest,
    })
}
