//! The dispatcher's hot path on SQLite. Each function runs in one `BEGIN IMMEDIATE`
//! transaction (SQLite has a single writer, so no `SKIP LOCKED` is needed) that commits
//! before returning; none is held across an HTTP call.
//!
//! Lease times are read from the clock once the transaction holds the write lock, not
//! before the wait for a pool connection and for `BEGIN IMMEDIATE`: a claim that waited
//! gets a lease that starts when it was written, and expiry is judged at that moment too.
//! (The request's `now` only judges which intents are due.)

use chrono::Utc;
use sqlx::sqlite::SqliteRow;
use sqlx::{Row, SqlitePool};

use super::{from_ms, ms};
use crate::intent::{ActionName, IdempotencyKey, OperationId, TenantId};
use crate::store::{
    lease_millis, ClaimRequest, ClaimedIntent, FairShare, Release, StoreError, LEASE_EXPIRED_ERROR,
};

/// The first tenant with pending intents after `?1` (one probe of
/// `outbox_intents_due_by_tenant`; `tenant` compares bytewise, SQLite's `BINARY`).
const NEXT_TENANT_SQL: &str = "SELECT tenant FROM outbox_intents \
    WHERE state = 'pending' AND tenant > ?1 ORDER BY tenant LIMIT 1";

/// The first tenant with pending intents at or after `?1` (an inclusive start).
const FIRST_TENANT_AT_SQL: &str = "SELECT tenant FROM outbox_intents \
    WHERE state = 'pending' AND tenant >= ?1 ORDER BY tenant LIMIT 1";

/// Up to `?4` due intents of tenant `?1` and action `?3` in claim order, only heads of
/// ordering chains (a seek in `outbox_intents_due_by_tenant` that stops at the first intent
/// not yet due).
const TENANT_DUE_SQL: &str = r#"
SELECT i.next_attempt_at, i.id FROM outbox_intents i
WHERE i.state = 'pending' AND i.tenant = ?1 AND i.action = ?3 AND i.next_attempt_at <= ?2
  AND (i.ordering_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM outbox_intents e
        WHERE e.tenant = i.tenant AND e.ordering_key = i.ordering_key AND e.id < i.id
          AND e.state IN ('pending', 'in_flight', 'unknown')))
ORDER BY i.next_attempt_at, i.id
LIMIT ?4
"#;

/// Marks the chosen intents (`?4`, a JSON array of ids) as in flight.
const CLAIM_SQL: &str = r#"
UPDATE outbox_intents
SET state = 'in_flight', lease_owner = ?1, lease_expires_at = ?3 + ?2,
    fencing_token = fencing_token + 1, attempt_count = attempt_count + 1,
    attempt_started_at = ?3, updated_at = ?3
WHERE id IN (SELECT value FROM json_each(?4)) AND state = 'pending'
RETURNING id, tenant, operation_id, action, payload, payload_version, idempotency_key,
          attempt_count, ambiguous_attempts, fencing_token, first_sent_at, created_at,
          deadline_at, budget_attempt_base, budget_started_at, resend_confirmed_attempt,
          next_attempt_at, lease_expires_at
"#;

const EXPIRED_SQL: &str = "SELECT id FROM outbox_intents \
    WHERE state = 'in_flight' AND lease_expires_at < ?1 ORDER BY lease_expires_at LIMIT ?2";

/// Writes the attempt a lapsed claim had opened (if any) as ambiguous, from the row as it
/// is before the takeover.
const CLOSE_EXPIRED_ATTEMPT_SQL: &str = "INSERT INTO outbox_attempts \
    (intent_id, attempt_number, fencing_token, owner, started_at, ended_at, class, error) \
    SELECT id, attempt_count, fencing_token, lease_owner, attempt_started_at, ?2, 'ambiguous', ?3 \
    FROM outbox_intents WHERE id = ?1 AND attempt_started_at IS NOT NULL";

/// Takes the lapsed claim over: counts its open attempt as ambiguous and bumps the token.
const TAKE_OVER_SQL: &str = r#"
UPDATE outbox_intents
SET fencing_token = fencing_token + 1, lease_owner = ?2, lease_expires_at = ?3 + ?4,
    ambiguous_attempts = ambiguous_attempts + (attempt_started_at IS NOT NULL),
    first_sent_at = coalesce(first_sent_at, attempt_started_at), attempt_started_at = NULL,
    last_error = ?5, updated_at = ?3
WHERE id = ?1
RETURNING id, tenant, operation_id, action, payload, payload_version, idempotency_key,
          attempt_count, ambiguous_attempts, fencing_token, first_sent_at, created_at,
          deadline_at, budget_attempt_base, budget_started_at, resend_confirmed_attempt,
          next_attempt_at, lease_expires_at
"#;

/// A claimed intent from its row; `claimed_at` is the clock reading its lease counts from.
fn claimed_from_row(row: &SqliteRow, claimed_at: i64) -> Result<ClaimedIntent, StoreError> {
    let payload: String = row.try_get("payload")?;
    let payload = serde_json::from_str(&payload)
        .map_err(|e| StoreError::Corrupt(format!("payload is not JSON: {e}")))?;
    Ok(ClaimedIntent {
        id: row.try_get("id")?,
        tenant: TenantId::from_store(row.try_get("tenant")?),
        operation_id: OperationId::from_store(row.try_get("operation_id")?),
        action: ActionName::from_store(row.try_get("action")?),
        payload,
        payload_version: row.try_get("payload_version")?,
        idempotency_key: IdempotencyKey::from_store(row.try_get("idempotency_key")?),
        attempt_count: row.try_get("attempt_count")?,
        ambiguous_attempts: row.try_get("ambiguous_attempts")?,
        fencing_token: row.try_get("fencing_token")?,
        first_sent_at: row.try_get::<Option<i64>, _>("first_sent_at")?.map(from_ms),
        created_at: from_ms(row.try_get("created_at")?),
        deadline_at: row.try_get::<Option<i64>, _>("deadline_at")?.map(from_ms),
        budget_attempt_base: row.try_get("budget_attempt_base")?,
        budget_started_at: row
            .try_get::<Option<i64>, _>("budget_started_at")?
            .map(from_ms),
        resend_confirmed_attempt: row.try_get("resend_confirmed_attempt")?,
        next_attempt_at: from_ms(row.try_get("next_attempt_at")?),
        lease_expires_at: from_ms(row.try_get("lease_expires_at")?),
        claimed_at: from_ms(claimed_at),
    })
}

/// The claim (see [`FairShare`]): walks the tenants with pending intents in name order from
/// `share.start` ([`FairShare::start_bound`]), wrapping around, takes up to
/// `share.per_tenant` due intents of each until `req.limit`, and marks them in flight, all
/// in one write transaction.
pub(super) async fn claim_due(
    pool: &SqlitePool,
    req: &ClaimRequest,
    share: &FairShare,
) -> Result<Vec<ClaimedIntent>, StoreError> {
    let limit = usize::try_from(req.limit).unwrap_or(usize::MAX);
    let (start, inclusive) = share.start_bound();
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let mut chosen: Vec<i64> = Vec::new();
    // (the tenant to probe from, whether it is itself a candidate, past the wrap-around)
    let (mut cursor, mut at_cursor, mut wrapped) = (start.to_owned(), inclusive, false);
    while chosen.len() < limit {
        let probe = if at_cursor {
            FIRST_TENANT_AT_SQL
        } else {
            NEXT_TENANT_SQL
        };
        let next: Option<String> = sqlx::query_scalar(probe)
            .bind(&cursor)
            .fetch_optional(&mut *tx)
            .await?;
        let tenant = match next {
            Some(t) if !wrapped || share.is_wrapped(&t) => t,
            None if !wrapped && !start.is_empty() => {
                (cursor, at_cursor, wrapped) = (String::new(), true, true);
                continue;
            }
            _ => break,
        };
        let want = (limit - chosen.len()).min(share.per_tenant.max(1) as usize);
        // One seek per action, then the first `want` of them in claim order.
        let mut due: Vec<(i64, i64)> = Vec::new();
        for action in &req.actions {
            let rows: Vec<(i64, i64)> = sqlx::query_as(TENANT_DUE_SQL)
                .bind(&tenant)
                .bind(ms(req.now))
                .bind(action)
                .bind(i64::try_from(want).unwrap_or(i64::MAX))
                .fetch_all(&mut *tx)
                .await?;
            due.extend(rows);
        }
        due.sort_unstable();
        let ids = due.into_iter().take(want).map(|(_, id)| id);
        chosen.extend(ids);
        (cursor, at_cursor) = (tenant, false);
    }
    let claimed_at = ms(Utc::now());
    let mut rows = sqlx::query(CLAIM_SQL)
        .bind(&req.owner)
        .bind(lease_millis(req))
        .bind(claimed_at)
        .bind(serde_json::to_string(&chosen).unwrap_or_else(|_| "[]".into()))
        .fetch_all(&mut *tx)
        .await?;
    rows.sort_by_key(|r| (r.get::<i64, _>("next_attempt_at"), r.get::<i64, _>("id")));
    let claimed = rows
        .iter()
        .map(|row| claimed_from_row(row, claimed_at))
        .collect::<Result<Vec<_>, _>>()?;
    tx.commit().await?;
    Ok(claimed)
}

pub(super) async fn reclaim_expired(
    pool: &SqlitePool,
    req: &ClaimRequest,
) -> Result<Vec<ClaimedIntent>, StoreError> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let now = ms(Utc::now());
    let ids: Vec<i64> = sqlx::query_scalar(EXPIRED_SQL)
        .bind(now)
        .bind(i64::from(req.limit))
        .fetch_all(&mut *tx)
        .await?;
    let mut taken = Vec::with_capacity(ids.len());
    for id in ids {
        sqlx::query(CLOSE_EXPIRED_ATTEMPT_SQL)
            .bind(id)
            .bind(now)
            .bind(LEASE_EXPIRED_ERROR)
            .execute(&mut *tx)
            .await?;
        let row = sqlx::query(TAKE_OVER_SQL)
            .bind(id)
            .bind(&req.owner)
            .bind(now)
            .bind(lease_millis(req))
            .bind(LEASE_EXPIRED_ERROR)
            .fetch_one(&mut *tx)
            .await?;
        taken.push(claimed_from_row(&row, now)?);
    }
    tx.commit().await?;
    Ok(taken)
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
        // The opened attempt first, from the claim as it is, then the release (fenced).
        sqlx::query(
            "INSERT INTO outbox_attempts (intent_id, attempt_number, fencing_token, owner, \
             started_at, ended_at, class, error, duration_ms) \
             SELECT id, attempt_count, fencing_token, lease_owner, attempt_started_at, ?3, \
             'not_sent', ?4, 0 FROM outbox_intents \
             WHERE id = ?1 AND fencing_token = ?2 AND state = 'in_flight' \
               AND attempt_started_at IS NOT NULL",
        )
        .bind(r.intent_id)
        .bind(r.fencing_token)
        .bind(now)
        .bind(&r.reason)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE outbox_intents SET state = 'pending', lease_owner = NULL, \
             lease_expires_at = NULL, attempt_started_at = NULL, next_attempt_at = ?3, \
             updated_at = ?3 WHERE id = ?1 AND fencing_token = ?2 AND state = 'in_flight'",
        )
        .bind(r.intent_id)
        .bind(r.fencing_token)
        .bind(now)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(())
}
