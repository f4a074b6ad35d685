//! The dispatcher's hot path on SQLite. Each function runs in one `BEGIN IMMEDIATE`
//! transaction (SQLite has a single writer, so no `SKIP LOCKED` is needed) that commits
//! before returning; none is held across an HTTP call.

use sqlx::sqlite::SqliteRow;
use sqlx::{Row, SqliteConnection, SqlitePool};

use super::{from_ms, ms};
use crate::action::AttemptClass;
use crate::store::{
    lease_millis, ClaimRequest, ClaimedIntent, OutcomeRecord, RecordResult, Release, StoreError,
    Transition, LEASE_EXPIRED_ERROR,
};

/// Marks the head of each ordering chain among due pending intents as in flight.
const CLAIM_DUE_SQL: &str = r#"
UPDATE outbox_intents
SET state = 'in_flight', lease_owner = ?2, lease_expires_at = ?1 + ?3,
    fencing_token = fencing_token + 1, attempt_count = attempt_count + 1, updated_at = ?1
WHERE id IN (
    SELECT i.id FROM outbox_intents i
    WHERE i.state = 'pending' AND i.next_attempt_at <= ?1
      AND i.action IN (SELECT value FROM json_each(?4))
      AND (i.ordering_key IS NULL OR NOT EXISTS (
            SELECT 1 FROM outbox_intents e
            WHERE e.tenant = i.tenant AND e.ordering_key = i.ordering_key AND e.id < i.id
              AND e.state IN ('pending', 'in_flight', 'unknown')))
    ORDER BY i.next_attempt_at, i.id
    LIMIT ?5)
RETURNING id, tenant, operation_id, action, payload, payload_version, idempotency_key,
          attempt_count, ambiguous_attempts, fencing_token, first_sent_at, created_at,
          deadline_at, budget_attempt_base, budget_started_at, next_attempt_at
"#;

const OPEN_ATTEMPT_SQL: &str = "INSERT INTO outbox_attempts \
    (intent_id, attempt_number, fencing_token, owner, started_at) VALUES (?1, ?2, ?3, ?4, ?5) \
    RETURNING id";

const EXPIRED_SQL: &str = "SELECT id FROM outbox_intents \
    WHERE state = 'in_flight' AND lease_expires_at < ?1 ORDER BY lease_expires_at LIMIT ?2";

const CLOSE_EXPIRED_ATTEMPTS_SQL: &str = "UPDATE outbox_attempts \
    SET ended_at = ?2, class = 'ambiguous', error = ?3 \
    WHERE intent_id = ?1 AND ended_at IS NULL RETURNING started_at";

const TAKE_OVER_SQL: &str = r#"
UPDATE outbox_intents
SET fencing_token = fencing_token + 1, lease_owner = ?2, lease_expires_at = ?3 + ?4,
    ambiguous_attempts = ambiguous_attempts + ?5, first_sent_at = coalesce(first_sent_at, ?6),
    last_error = ?7, updated_at = ?3
WHERE id = ?1
RETURNING id, tenant, operation_id, action, payload, payload_version, idempotency_key,
          attempt_count, ambiguous_attempts, fencing_token, first_sent_at, created_at,
          deadline_at, budget_attempt_base, budget_started_at, NULL AS attempt_id
"#;

const RECORD_INTENT_SQL: &str = r#"
UPDATE outbox_intents
SET state = ?3, next_attempt_at = coalesce(?4, next_attempt_at),
    lease_owner = NULL, lease_expires_at = NULL,
    provider_ref = coalesce(?5, provider_ref), last_error = coalesce(?6, last_error),
    last_http_status = coalesce(?7, last_http_status),
    ambiguous_attempts = ambiguous_attempts + ?8, first_sent_at = coalesce(first_sent_at, ?9),
    finished_at = CASE WHEN ?3 IN ('delivered', 'failed') THEN ?10 ELSE NULL END,
    updated_at = ?10
WHERE id = ?1 AND fencing_token = ?2 AND state = 'in_flight'
RETURNING tenant
"#;

const RECORD_ATTEMPT_SQL: &str = "UPDATE outbox_attempts \
    SET ended_at = ?2, class = ?3, http_status = ?4, error = ?5, provider_ref = ?6, duration_ms = ?7, \
    started_at = ?8 WHERE id = ?1 AND ended_at IS NULL";

const OPEN_RECONCILIATION_SQL: &str = "INSERT INTO outbox_reconciliation_items \
    (intent_id, tenant, reason, opened_at) VALUES (?1, ?2, ?3, ?4) \
    ON CONFLICT (intent_id) WHERE resolved_at IS NULL DO NOTHING";

fn claimed_from_row(row: &SqliteRow, attempt_id: Option<i64>) -> Result<ClaimedIntent, StoreError> {
    let payload: String = row.try_get("payload")?;
    let payload = serde_json::from_str(&payload)
        .map_err(|e| StoreError::Corrupt(format!("payload is not JSON: {e}")))?;
    Ok(ClaimedIntent {
        id: row.try_get("id")?,
        tenant: row.try_get("tenant")?,
        operation_id: row.try_get("operation_id")?,
        action: row.try_get("action")?,
        payload,
        payload_version: row.try_get("payload_version")?,
        idempotency_key: row.try_get("idempotency_key")?,
        attempt_count: row.try_get("attempt_count")?,
        ambiguous_attempts: row.try_get("ambiguous_attempts")?,
        fencing_token: row.try_get("fencing_token")?,
        attempt_id,
        first_sent_at: row.try_get::<Option<i64>, _>("first_sent_at")?.map(from_ms),
        created_at: from_ms(row.try_get("created_at")?),
        deadline_at: row.try_get::<Option<i64>, _>("deadline_at")?.map(from_ms),
        budget_attempt_base: row.try_get("budget_attempt_base")?,
        budget_started_at: row
            .try_get::<Option<i64>, _>("budget_started_at")?
            .map(from_ms),
    })
}

pub(super) async fn claim_due(
    pool: &SqlitePool,
    req: &ClaimRequest,
) -> Result<Vec<ClaimedIntent>, StoreError> {
    let actions = serde_json::to_string(&req.actions).unwrap_or_else(|_| "[]".into());
    let now = ms(req.now);
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let mut rows = sqlx::query(CLAIM_DUE_SQL)
        .bind(now)
        .bind(&req.owner)
        .bind(lease_millis(req))
        .bind(actions)
        .bind(i64::from(req.limit))
        .fetch_all(&mut *tx)
        .await?;
    rows.sort_by_key(|r| (r.get::<i64, _>("next_attempt_at"), r.get::<i64, _>("id")));
    let mut claimed = Vec::with_capacity(rows.len());
    for row in &rows {
        let attempt_id: i64 = sqlx::query_scalar(OPEN_ATTEMPT_SQL)
            .bind(row.try_get::<i64, _>("id")?)
            .bind(row.try_get::<i32, _>("attempt_count")?)
            .bind(row.try_get::<i64, _>("fencing_token")?)
            .bind(&req.owner)
            .bind(now)
            .fetch_one(&mut *tx)
            .await?;
        claimed.push(claimed_from_row(row, Some(attempt_id))?);
    }
    tx.commit().await?;
    Ok(claimed)
}

pub(super) async fn reclaim_expired(
    pool: &SqlitePool,
    req: &ClaimRequest,
) -> Result<Vec<ClaimedIntent>, StoreError> {
    let now = ms(req.now);
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let ids: Vec<i64> = sqlx::query_scalar(EXPIRED_SQL)
        .bind(now)
        .bind(i64::from(req.limit))
        .fetch_all(&mut *tx)
        .await?;
    let mut taken = Vec::with_capacity(ids.len());
    for id in ids {
        let starts: Vec<i64> = sqlx::query_scalar(CLOSE_EXPIRED_ATTEMPTS_SQL)
            .bind(id)
            .bind(now)
            .bind(LEASE_EXPIRED_ERROR)
            .fetch_all(&mut *tx)
            .await?;
        let row = sqlx::query(TAKE_OVER_SQL)
            .bind(id)
            .bind(&req.owner)
            .bind(now)
            .bind(lease_millis(req))
            .bind(i64::try_from(starts.len()).unwrap_or(0))
            .bind(starts.iter().min().copied())
            .bind(LEASE_EXPIRED_ERROR)
            .fetch_one(&mut *tx)
            .await?;
        taken.push(claimed_from_row(&row, None)?);
    }
    tx.commit().await?;
    Ok(taken)
}

async fn record_one(
    conn: &mut SqliteConnection,
    o: &OutcomeRecord,
) -> Result<RecordResult, StoreError> {
    let (next_at, provider_ref, reason) = match &o.transition {
        Transition::Delivered { provider_ref } => (None, provider_ref.clone(), None),
        Transition::RetryAt { at } => (Some(ms(*at)), None, None),
        Transition::Failed { reason } | Transition::Unknown { reason } => {
            (None, None, Some(reason.clone()))
        }
    };
    let attempt = o.attempt.as_ref();
    let error = reason.or_else(|| attempt.and_then(|a| a.error.clone()));
    let provider_ref = provider_ref.or_else(|| attempt.and_then(|a| a.provider_ref.clone()));
    let now = ms(o.now);
    let tenant: Option<String> = sqlx::query_scalar(RECORD_INTENT_SQL)
        .bind(o.intent_id)
        .bind(o.fencing_token)
        .bind(o.transition.state().as_str())
        .bind(next_at)
        .bind(&provider_ref)
        .bind(&error)
        .bind(attempt.and_then(|a| a.http_status).map(i32::from))
        .bind(i32::from(attempt.is_some_and(|a| a.class.is_ambiguous())))
        .bind(
            attempt
                .filter(|a| a.class != AttemptClass::NotSent)
                .map(|a| ms(a.started_at)),
        )
        .bind(now)
        .fetch_optional(&mut *conn)
        .await?;
    let Some(tenant) = tenant else {
        return Ok(RecordResult::Fenced);
    };
    if let Some(a) = attempt {
        sqlx::query(RECORD_ATTEMPT_SQL)
            .bind(a.attempt_id)
            .bind(now)
            .bind(a.class.as_str())
            .bind(a.http_status.map(i32::from))
            .bind(&error)
            .bind(&provider_ref)
            .bind(i64::try_from(a.duration.as_millis()).unwrap_or(i64::MAX))
            .bind(ms(a.started_at))
            .execute(&mut *conn)
            .await?;
    }
    if let Transition::Unknown { reason } = &o.transition {
        sqlx::query(OPEN_RECONCILIATION_SQL)
            .bind(o.intent_id)
            .bind(tenant)
            .bind(reason)
            .bind(now)
            .execute(&mut *conn)
            .await?;
    }
    Ok(RecordResult::Recorded)
}

pub(super) async fn record_outcomes(
    pool: &SqlitePool,
    outcomes: &[OutcomeRecord],
) -> Result<Vec<RecordResult>, StoreError> {
    if outcomes.is_empty() {
        return Ok(Vec::new());
    }
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let mut results = Vec::with_capacity(outcomes.len());
    for o in outcomes {
        results.push(record_one(&mut tx, o).await?);
    }
    tx.commit().await?;
    Ok(results)
}

pub(super) async fn release_claims(
    pool: &SqlitePool,
    releases: &[Release],
    now: chrono::DateTime<chrono::Utc>,
) -> Result<(), StoreError> {
    if releases.is_empty() {
        return Ok(());
    }
    let now = ms(now);
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    for r in releases {
        let released = sqlx::query(
            "UPDATE outbox_intents SET state = 'pending', lease_owner = NULL, \
             lease_expires_at = NULL, next_attempt_at = ?3, updated_at = ?3 \
             WHERE id = ?1 AND fencing_token = ?2 AND state = 'in_flight'",
        )
        .bind(r.intent_id)
        .bind(r.fencing_token)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        if released.rows_affected() == 1 {
            sqlx::query(
                "UPDATE outbox_attempts SET ended_at = ?2, class = 'not_sent', error = ?3, \
                 duration_ms = 0 WHERE id = ?1 AND ended_at IS NULL",
            )
            .bind(r.attempt_id)
            .bind(now)
            .bind(&r.reason)
            .execute(&mut *tx)
            .await?;
        }
    }
    tx.commit().await?;
    Ok(())
}
