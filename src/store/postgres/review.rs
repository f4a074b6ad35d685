//! The people side on PostgreSQL: reconciliation items and their resolutions, cancels,
//! probe findings and the audit log. Each change and its audit entry commit together.

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::types::Json;
use sqlx::AssertSqlSafe;
use sqlx::{PgConnection, PgPool, Row};

use super::reads::{intent_from_row, INTENT_COLUMNS};
use crate::intent::{ActionName, IdempotencyKey, IntentId, OperationId, TenantId};
use crate::store::{
    check_cancel, check_resolution, check_resolution_of, check_seen, resend_confirmed_attempt,
    AuditEntry, AuditEntryId, AuditFilter, Cancellation, IntentRow, NewAuditEntry,
    ReconciliationFilter, ReconciliationItem, ReconciliationItemId, Resolution, ResolutionKind,
    ReviewError, StoreError, TenantScope,
};

const ITEM_SELECT: &str = "SELECT r.id, r.intent_id, r.tenant, i.operation_id, i.action, \
    i.idempotency_key, r.reason, r.opened_at, r.resolution, r.resolved_by, r.resolved_at, \
    r.resolution_note, r.resolved_provider_ref, r.probe_finding, r.probe_checked_at, r.probe_count \
    FROM outbox_reconciliation_items r JOIN outbox_intents i ON i.id = r.intent_id";

fn item_from_row(row: &PgRow) -> Result<ReconciliationItem, StoreError> {
    Ok(ReconciliationItem {
        id: row.try_get("id")?,
        intent_id: row.try_get("intent_id")?,
        tenant: TenantId::from_store(row.try_get("tenant")?),
        operation_id: OperationId::from_store(row.try_get("operation_id")?),
        action: ActionName::from_store(row.try_get("action")?),
        idempotency_key: IdempotencyKey::from_store(row.try_get("idempotency_key")?),
        reason: row.try_get("reason")?,
        opened_at: row.try_get("opened_at")?,
        resolution: row.try_get("resolution")?,
        resolved_by: row.try_get("resolved_by")?,
        resolved_at: row.try_get("resolved_at")?,
        resolution_note: row.try_get("resolution_note")?,
        resolved_provider_ref: row.try_get("resolved_provider_ref")?,
        probe_finding: row.try_get("probe_finding")?,
        probe_checked_at: row.try_get("probe_checked_at")?,
        probe_count: row.try_get("probe_count")?,
    })
}

pub(super) async fn list_reconciliation(
    pool: &PgPool,
    f: &ReconciliationFilter,
) -> Result<Vec<ReconciliationItem>, StoreError> {
    let sql = format!(
        "{ITEM_SELECT} WHERE ($1::text[] IS NULL OR r.tenant = ANY($1)) \
         AND (NOT $2 OR r.resolved_at IS NULL) AND ($3::text IS NULL OR i.action = $3) \
         AND ($4::timestamptz IS NULL OR r.opened_at < $4) AND r.id > $5 \
         ORDER BY r.opened_at, r.id LIMIT $6"
    );
    let rows = sqlx::query(AssertSqlSafe(sql))
        .bind(f.scope.as_list())
        .bind(f.open_only)
        .bind(f.action.as_deref())
        .bind(f.opened_before)
        .bind(f.after_id.map_or(0, ReconciliationItemId::get))
        .bind(i64::from(f.limit.max(1)))
        .fetch_all(pool)
        .await?;
    rows.iter().map(item_from_row).collect()
}

pub(super) async fn get_reconciliation(
    pool: &PgPool,
    id: ReconciliationItemId,
    scope: &TenantScope,
) -> Result<Option<ReconciliationItem>, StoreError> {
    let sql =
        format!("{ITEM_SELECT} WHERE r.id = $1 AND ($2::text[] IS NULL OR r.tenant = ANY($2))");
    let row = sqlx::query(AssertSqlSafe(sql))
        .bind(id)
        .bind(scope.as_list())
        .fetch_optional(pool)
        .await?;
    row.as_ref().map(item_from_row).transpose()
}

pub(super) async fn reconciliation_for_intent(
    pool: &PgPool,
    intent_id: IntentId,
) -> Result<Vec<ReconciliationItem>, StoreError> {
    let sql = format!("{ITEM_SELECT} WHERE r.intent_id = $1 ORDER BY r.opened_at, r.id");
    let rows = sqlx::query(AssertSqlSafe(sql))
        .bind(intent_id)
        .fetch_all(pool)
        .await?;
    rows.iter().map(item_from_row).collect()
}

/// `resolution, resolved_by, resolved_at` of an item.
type ResolvedColumns = (Option<String>, Option<String>, Option<DateTime<Utc>>);

/// Marks the item resolved; returns its intent id, or why it could not be.
async fn close_item(conn: &mut PgConnection, r: &Resolution) -> Result<IntentId, ReviewError> {
    let provider_ref = match &r.kind {
        ResolutionKind::Delivered { provider_ref } => Some(provider_ref.as_str()),
        _ => None,
    };
    let closed: Option<IntentId> = sqlx::query_scalar(
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
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(intent_id) = closed {
        return Ok(intent_id);
    }
    let existing: Option<ResolvedColumns> = sqlx::query_as(
        "SELECT resolution, resolved_by, resolved_at FROM outbox_reconciliation_items \
         WHERE id = $1 AND ($2::text[] IS NULL OR tenant = ANY($2))",
    )
    .bind(r.item_id)
    .bind(r.scope.as_list())
    .fetch_optional(&mut *conn)
    .await?;
    match existing {
        Some((Some(resolution), Some(resolved_by), Some(resolved_at))) => {
            Err(ReviewError::AlreadyResolved {
                resolution,
                resolved_by,
                resolved_at,
            })
        }
        _ => Err(ReviewError::NotFound),
    }
}

/// Moves the unknown intent to where the resolution says.
async fn apply_to_intent(
    conn: &mut PgConnection,
    intent_id: IntentId,
    r: &Resolution,
    confirmed_attempt: Option<i32>,
) -> Result<(), ReviewError> {
    let query = match &r.kind {
        ResolutionKind::Delivered { provider_ref } => sqlx::query(
            "UPDATE outbox_intents SET state = 'delivered', provider_ref = $3, finished_at = $2, \
             updated_at = $2 WHERE id = $1 AND state = 'unknown'",
        )
        .bind(intent_id)
        .bind(r.now)
        .bind(provider_ref),
        ResolutionKind::Redispatch => sqlx::query(
            "UPDATE outbox_intents SET state = 'pending', next_attempt_at = $2, updated_at = $2, \
             budget_attempt_base = attempt_count, budget_started_at = $2, \
             resend_confirmed_attempt = $3 WHERE id = $1 AND state = 'unknown'",
        )
        .bind(intent_id)
        .bind(r.now)
        .bind(confirmed_attempt),
        ResolutionKind::Abandoned => sqlx::query(
            "UPDATE outbox_intents SET state = 'abandoned', finished_at = $2, updated_at = $2 \
             WHERE id = $1 AND state = 'unknown'",
        )
        .bind(intent_id)
        .bind(r.now),
    };
    if query.execute(&mut *conn).await?.rows_affected() != 1 {
        let state: String = sqlx::query_scalar("SELECT state FROM outbox_intents WHERE id = $1")
            .bind(intent_id)
            .fetch_one(&mut *conn)
            .await?;
        return Err(ReviewError::WrongState {
            state,
            what: "only an unknown outcome can be resolved",
        });
    }
    if r.kind == ResolutionKind::Redispatch {
        sqlx::query("SELECT pg_notify('outboxd_intents', '')")
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

pub(super) async fn resolve_reconciliation(
    pool: &PgPool,
    r: &Resolution,
) -> Result<ReconciliationItem, ReviewError> {
    check_resolution(r)?;
    let mut tx = pool.begin().await?;
    let intent_id = close_item(&mut tx, r).await?;
    let sql = format!("SELECT {INTENT_COLUMNS} FROM outbox_intents WHERE id = $1 FOR UPDATE");
    let intent = intent_from_row(
        &sqlx::query(AssertSqlSafe(sql))
            .bind(intent_id)
            .fetch_one(&mut *tx)
            .await?,
    )?;
    let risk = check_resolution_of(r, &intent)?;
    let confirmed_attempt = resend_confirmed_attempt(&r.resend, &intent);
    apply_to_intent(&mut tx, intent_id, r, confirmed_attempt).await?;
    append_audit_on(&mut tx, &crate::store::resolution_audit(r, &intent, risk)).await?;
    tx.commit().await?;
    get_reconciliation(pool, r.item_id, &TenantScope::All)
        .await?
        .ok_or(ReviewError::NotFound)
}

pub(super) async fn cancel_intent(
    pool: &PgPool,
    c: &Cancellation,
) -> Result<IntentRow, ReviewError> {
    crate::store::check_note(&c.note)?;
    let mut tx = pool.begin().await?;
    let sql = format!(
        "SELECT {INTENT_COLUMNS} FROM outbox_intents WHERE id = $1 \
         AND ($2::text[] IS NULL OR tenant = ANY($2)) FOR UPDATE"
    );
    let row = sqlx::query(AssertSqlSafe(sql))
        .bind(c.intent_id)
        .bind(c.scope.as_list())
        .fetch_optional(&mut *tx)
        .await?
        .ok_or(ReviewError::NotFound)?;
    let before = intent_from_row(&row)?;
    check_seen(c.seen_attempt_count, &before)?;
    check_cancel(before.state.as_str(), before.ambiguous_attempts)?;
    sqlx::query("UPDATE outbox_intents SET state = 'cancelled', finished_at = $2, updated_at = $2 WHERE id = $1")
        .bind(c.intent_id)
        .bind(c.now)
        .execute(&mut *tx)
        .await?;
    append_audit_on(
        &mut tx,
        &NewAuditEntry {
            actor: c.actor.clone(),
            action: "intent.cancel".into(),
            tenant: Some(before.tenant.clone()),
            intent_id: Some(c.intent_id),
            details: serde_json::json!({}),
            note: Some(c.note.clone()),
            at: c.now,
        },
    )
    .await?;
    let sql = "SELECT * FROM outbox_intents WHERE id = $1";
    let updated = sqlx::query(sql)
        .bind(c.intent_id)
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(intent_from_row(&updated)?)
}

pub(super) async fn record_probe_finding(
    pool: &PgPool,
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
    .execute(pool)
    .await?;
    Ok(())
}

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

pub(super) async fn append_audit(
    pool: &PgPool,
    e: &NewAuditEntry,
) -> Result<AuditEntryId, StoreError> {
    let mut conn = pool.acquire().await?;
    append_audit_on(&mut conn, e).await
}

pub(super) async fn search_audit(
    pool: &PgPool,
    f: &AuditFilter,
) -> Result<Vec<AuditEntry>, StoreError> {
    let rows = sqlx::query(
        "SELECT id, at, actor, action, tenant, intent_id, details, note FROM outbox_audit_log \
         WHERE ($1::text[] IS NULL OR tenant = ANY($1)) AND ($2::bigint IS NULL OR id < $2) \
         AND ($3::text IS NULL OR actor = $3) AND ($4::text IS NULL OR action = $4) \
         AND ($5::bigint IS NULL OR intent_id = $5) ORDER BY id DESC LIMIT $6",
    )
    .bind(f.scope.as_list())
    .bind(f.before_id)
    .bind(f.actor.as_deref())
    .bind(f.action.as_deref())
    .bind(f.intent_id)
    .bind(i64::from(f.limit.max(1)))
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|row| {
            let details: Json<serde_json::Value> = row.try_get("details")?;
            Ok(AuditEntry {
                id: row.try_get("id")?,
                at: row.try_get("at")?,
                actor: row.try_get("actor")?,
                action: row.try_get("action")?,
                tenant: row
                    .try_get::<Option<String>, _>("tenant")?
                    .map(TenantId::from_store),
                intent_id: row.try_get("intent_id")?,
                details: details.0,
                note: row.try_get("note")?,
            })
        })
        .collect()
}
