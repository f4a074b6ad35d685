//! Retention on SQLite: prune finished intents with their attempts (items cascade), keeping a
//! tombstone per operation, and expire old tombstones ([`RetentionStore`]). One
//! `BEGIN IMMEDIATE` transaction per batch.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::AssertSqlSafe;

use super::{ms, SqliteStore};
use crate::store::{PrunedTable, Reclaim, RetentionStore, StoreError};

/// Oldest first by `(finished_at, id)`: the order of `outbox_intents_finished`, whose
/// entries carry the rowid (`id`), so no sort; the three statements of a batch must pick the
/// same rows, which a total order guarantees. (PostgreSQL orders by `finished_at` alone.)
const VICTIMS: &str = "SELECT id FROM outbox_intents WHERE finished_at < ?1 \
    AND state IN ('delivered', 'failed', 'cancelled', 'abandoned') ORDER BY finished_at, id LIMIT ?2";

/// Deletes up to `?2` tombstones finished before `?1`, oldest pruned first, by rowid.
const EXPIRE_TOMBSTONES_SQL: &str = "DELETE FROM outbox_tombstones WHERE rowid IN (\
    SELECT rowid FROM outbox_tombstones WHERE coalesce(finished_at, pruned_at) < ?1 \
    ORDER BY pruned_at LIMIT ?2)";

// Dialect twin of postgres/retention.rs `impl RetentionStore for PgStore`: the same
// victims and tombstones (three statements here, one CTE there). Nothing to reclaim: the
// pages a delete frees go to the file's freelist and the next inserts take them, so the
// file stays at its high-water mark instead of growing; `VACUUM` would rewrite the whole
// file under an exclusive lock, and `PRAGMA optimize` would start planner statistics
// (`sqlite_stat1`) the daemon's statements were never measured with.
#[async_trait]
impl RetentionStore for SqliteStore {
    async fn prune_finished(
        &self,
        finished_before: DateTime<Utc>,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<u64, StoreError> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
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

    async fn prune_tombstones(
        &self,
        finished_before: DateTime<Utc>,
        limit: u32,
    ) -> Result<u64, StoreError> {
        let done = sqlx::query(EXPIRE_TOMBSTONES_SQL)
            .bind(ms(finished_before))
            .bind(i64::from(limit.max(1)))
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }

    async fn reclaim(&self, _tables: &[PrunedTable]) -> Result<Reclaim, StoreError> {
        Ok(Reclaim::NotNeeded)
    }
}
