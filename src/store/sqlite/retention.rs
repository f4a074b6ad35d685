//! Retention on SQLite: prune finished intents with their attempts (items cascade), keeping a
//! tombstone per operation, and expire old tombstones. One `BEGIN IMMEDIATE` transaction
//! per batch.

use chrono::{DateTime, Utc};
use sqlx::AssertSqlSafe;
use sqlx::{Row, SqlitePool};

use super::{from_ms, ms};
use crate::intent::{OperationId, TenantId};
use crate::store::{StoreError, Tombstone};

const VICTIMS: &str = "SELECT id FROM outbox_intents WHERE finished_at < ?1 \
    AND state IN ('delivered', 'failed', 'cancelled', 'abandoned') ORDER BY finished_at, id LIMIT ?2";

pub(super) async fn prune_finished(
    pool: &SqlitePool,
    finished_before: DateTime<Utc>,
    now: DateTime<Utc>,
    limit: u32,
) -> Result<u64, StoreError> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let keep = format!(
        "INSERT INTO outbox_tombstones (tenant, operation_id, intent_id, action, payload_sha256, \
         idempotency_key, final_state, provider_ref, finished_at, pruned_at) \
         SELECT tenant, operation_id, id, action, payload_sha256, idempotency_key, state, \
         provider_ref, finished_at, ?3 FROM outbox_intents WHERE id IN ({VICTIMS}) \
         ON CONFLICT (tenant, operation_id) DO NOTHING"
    );
    sqlx::query(AssertSqlSafe(keep))
        .bind(ms(finished_before))
        .bind(i64::from(limit.max(1)))
        .bind(ms(now))
        .execute(&mut *tx)
        .await?;
    sqlx::query(AssertSqlSafe(format!(
        "DELETE FROM outbox_attempts WHERE intent_id IN ({VICTIMS})"
    )))
    .bind(ms(finished_before))
    .bind(i64::from(limit.max(1)))
    .execute(&mut *tx)
    .await?;
    let gone = sqlx::query(AssertSqlSafe(format!(
        "DELETE FROM outbox_intents WHERE id IN ({VICTIMS})"
    )))
    .bind(ms(finished_before))
    .bind(i64::from(limit.max(1)))
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(gone.rows_affected())
}

/// Deletes up to `?2` tombstones finished before `?1`, oldest pruned first, by rowid.
const EXPIRE_TOMBSTONES_SQL: &str = "DELETE FROM outbox_tombstones WHERE rowid IN (\
    SELECT rowid FROM outbox_tombstones WHERE coalesce(finished_at, pruned_at) < ?1 \
    ORDER BY pruned_at LIMIT ?2)";

pub(super) async fn prune_tombstones(
    pool: &SqlitePool,
    finished_before: DateTime<Utc>,
    limit: u32,
) -> Result<u64, StoreError> {
    let done = sqlx::query(EXPIRE_TOMBSTONES_SQL)
        .bind(ms(finished_before))
        .bind(i64::from(limit.max(1)))
        .execute(pool)
        .await?;
    Ok(done.rows_affected())
}

pub(super) async fn find_tombstone(
    pool: &SqlitePool,
    tenant: &TenantId,
    operation_id: &OperationId,
) -> Result<Option<Tombstone>, StoreError> {
    let row = sqlx::query(
        "SELECT tenant, operation_id, intent_id, payload_sha256, final_state, provider_ref, pruned_at \
         FROM outbox_tombstones WHERE tenant = ?1 AND operation_id = ?2",
    )
    .bind(tenant.as_str())
    .bind(operation_id.as_str())
    .fetch_optional(pool)
    .await?;
    row.map(|row| {
        Ok(Tombstone {
            tenant: TenantId::from_store(row.try_get("tenant")?),
            operation_id: OperationId::from_store(row.try_get("operation_id")?),
            intent_id: row.try_get("intent_id")?,
            payload_sha256: row.try_get("payload_sha256")?,
            final_state: row.try_get("final_state")?,
            provider_ref: row.try_get("provider_ref")?,
            pruned_at: from_ms(row.try_get("pruned_at")?),
        })
    })
    .transpose()
}
