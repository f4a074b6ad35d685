//! The operator console's statements on SQLite: dashboard counts, recent attempt ends,
//! the intent search, the ordering blocker of an intent, and the redispatch of a failed
//! intent. The rules come from [`crate::store::console`]; this module binds and runs SQL.

use chrono::{DateTime, Utc};
use sqlx::AssertSqlSafe;
use sqlx::{Row, SqlitePool};

use super::reads::{intent_from_row, INTENT_COLUMNS};
use super::review::{append_audit_on, scope_json};
use super::{from_ms, ms};
use crate::intent::{IntentId, IntentState};
use crate::store::{
    check_failed_redispatch, check_redispatch, parse_class, parse_state, resend_confirmed_attempt,
    AttemptEnd, ConsoleCounts, IntentRow, IntentSearch, ReconciliationItemId, Redispatch,
    ReviewError, StoreError, TenantScope,
};

/// How many due intents the oldest-due query looks at (the due index, in order).
const DUE_SCAN: i64 = 1000;

pub(super) async fn console_counts(
    pool: &SqlitePool,
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
    .fetch_all(pool)
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
    .fetch_one(pool)
    .await?;
    let open: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM outbox_reconciliation_items WHERE resolved_at IS NULL \
         AND (?1 IS NULL OR tenant IN (SELECT value FROM json_each(?1)))",
    )
    .bind(&scope)
    .fetch_one(pool)
    .await?;
    let oldest: Option<(ReconciliationItemId, i64)> = sqlx::query_as(
        "SELECT id, opened_at FROM outbox_reconciliation_items WHERE resolved_at IS NULL \
         AND (?1 IS NULL OR tenant IN (SELECT value FROM json_each(?1))) \
         ORDER BY opened_at, id LIMIT 1",
    )
    .bind(&scope)
    .fetch_optional(pool)
    .await?;
    Ok(ConsoleCounts {
        by_action_state: rows
            .into_iter()
            .map(|(action, state, n)| Ok((action, parse_state(&state)?, n)))
            .collect::<Result<_, StoreError>>()?,
        oldest_due_at: oldest_due_at.map(from_ms),
        reconciliation_open: open,
        reconciliation_oldest: oldest.map(|(id, at)| (id, from_ms(at))),
    })
}

pub(super) async fn recent_attempt_ends(
    pool: &SqlitePool,
    scope: &TenantScope,
    since: DateTime<Utc>,
    scan_limit: u32,
) -> Result<Vec<AttemptEnd>, StoreError> {
    let rows = sqlx::query(
        "SELECT a.ended_at, a.class FROM \
         (SELECT intent_id, ended_at, class FROM outbox_attempts ORDER BY id DESC LIMIT ?3) a \
         JOIN outbox_intents i ON i.id = a.intent_id \
         WHERE a.ended_at >= ?1 AND a.class IS NOT NULL \
         AND (?2 IS NULL OR i.tenant IN (SELECT value FROM json_each(?2)))",
    )
    .bind(ms(since))
    .bind(scope_json(scope))
    .bind(i64::from(scan_limit.max(1)))
    .fetch_all(pool)
    .await?;
    let mut ends = Vec::with_capacity(rows.len());
    for row in &rows {
        if let Some(class) = parse_class(row.try_get("class")?)? {
            ends.push(AttemptEnd {
                ended_at: from_ms(row.try_get("ended_at")?),
                class,
            });
        }
    }
    Ok(ends)
}

pub(super) async fn search_intents(
    pool: &SqlitePool,
    s: &IntentSearch,
) -> Result<Vec<IntentRow>, StoreError> {
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
        .fetch_all(pool)
        .await?;
    rows.iter().map(intent_from_row).collect()
}

pub(super) async fn ordering_blocker(
    pool: &SqlitePool,
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
    .fetch_optional(pool)
    .await?;
    row.map(|(id, state)| Ok((id, parse_state(&state)?)))
        .transpose()
}

pub(super) async fn redispatch_failed(
    pool: &SqlitePool,
    r: &Redispatch,
) -> Result<IntentRow, ReviewError> {
    check_redispatch(r)?;
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let sql = format!(
        "SELECT {INTENT_COLUMNS} FROM outbox_intents WHERE id = ?1 \
         AND (?2 IS NULL OR tenant IN (SELECT value FROM json_each(?2)))"
    );
    let row = sqlx::query(AssertSqlSafe(sql))
        .bind(r.intent_id)
        .bind(scope_json(&r.scope))
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(ReviewError::NotFound)?;
    let before = intent_from_row(&row)?;
    let risk = check_failed_redispatch(r, &before)?;
    sqlx::query(
        "UPDATE outbox_intents SET state = 'pending', next_attempt_at = ?2, updated_at = ?2, \
         finished_at = NULL, budget_attempt_base = attempt_count, budget_started_at = ?2, \
         resend_confirmed_attempt = ?3 WHERE id = ?1 AND state = 'failed'",
    )
    .bind(r.intent_id)
    .bind(ms(r.now))
    .bind(resend_confirmed_attempt(&r.resend, &before))
    .execute(&mut *tx)
    .await?;
    append_audit_on(
        &mut tx,
        &crate::store::failed_redispatch_audit(r, &before, risk),
    )
    .await?;
    let sql = format!("SELECT {INTENT_COLUMNS} FROM outbox_intents WHERE id = ?1");
    let updated = sqlx::query(AssertSqlSafe(sql))
        .bind(r.intent_id)
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(intent_from_row(&updated)?)
}
