//! Retention on PostgreSQL: prune finished intents with their attempts (items cascade) while
//! keeping a tombstone per operation, expire old tombstones, and vacuum what a pass pruned
//! ([`RetentionStore`]).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::AssertSqlSafe;

use super::PgStore;
use crate::store::{PrunedTable, Reclaim, RetentionStore, StoreError};

/// Moves up to `$2` intents finished before `$1` to tombstones, in one statement; rows
/// locked by someone else are skipped. On error nothing is pruned.
///
/// Oldest first in the order of `outbox_intents_finished` alone: no tie-break on `id`,
/// which that index does not carry. With one (say, a bulk cancel's rows, all finished in
/// one transaction) the planner sorted every tied row, or the whole table, once per batch.
const PRUNE_SQL: &str = r#"
WITH victims AS (
    SELECT id FROM outbox_intents
    WHERE finished_at < $1 AND state IN ('delivered', 'failed', 'cancelled', 'abandoned')
    ORDER BY finished_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), kept AS (
    INSERT INTO outbox_tombstones (tenant, operation_id, intent_id, action, payload_sha256,
                                   idempotency_key, final_state, provider_ref, finished_at, pruned_at)
    SELECT i.tenant, i.operation_id, i.id, i.action, i.payload_sha256, i.idempotency_key,
           i.state, i.provider_ref, i.finished_at, $3
    FROM outbox_intents i JOIN victims v ON v.id = i.id
    ON CONFLICT (tenant, operation_id) DO NOTHING
    RETURNING intent_id
), attempts_gone AS (
    DELETE FROM outbox_attempts a USING victims v WHERE a.intent_id = v.id
), gone AS (
    DELETE FROM outbox_intents i USING victims v WHERE i.id = v.id RETURNING i.id
)
SELECT count(*) FROM gone
"#;

/// Deletes up to `$2` tombstones finished before `$1`, walking `outbox_tombstones_pruned`
/// (oldest pruned first, where expired ones gather) by primary key; rows locked by someone
/// else are skipped.
const EXPIRE_TOMBSTONES_SQL: &str = r#"
DELETE FROM outbox_tombstones t USING (
    SELECT tenant, operation_id FROM outbox_tombstones
    WHERE coalesce(finished_at, pruned_at) < $1
    ORDER BY pruned_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
) v
WHERE t.tenant = v.tenant AND t.operation_id = v.operation_id
"#;

/// Which of the tables named in `$1` this role may vacuum: the rule of PostgreSQL's
/// `VACUUM` (table owner, or database owner for a table that is not shared, or on
/// PostgreSQL 17 the `MAINTAIN` privilege); a table it may not vacuum is skipped with only
/// a server warning, so it is asked first. The `regclass` is cast to `oid`, so the join is
/// the built-in `oid = oid`, which no operator created in a schema on the path outbids.
const MAY_VACUUM_SQL: &str = r#"
SELECT t.name,
       pg_catalog.pg_has_role(current_user, c.relowner, 'USAGE'::text)
       OR (NOT c.relisshared AND pg_catalog.pg_has_role(current_user, d.datdba, 'USAGE'::text))
       OR CASE WHEN pg_catalog.current_setting('server_version_num'::text)::int >= 170000
               THEN pg_catalog.has_table_privilege(c.oid, 'MAINTAIN'::text) ELSE false END
  FROM pg_catalog.unnest($1::text[]) AS t(name)
  JOIN pg_catalog.pg_class c ON c.oid = pg_catalog.to_regclass(t.name)::pg_catalog.oid
  JOIN pg_catalog.pg_database d ON d.datname = pg_catalog.current_database()
"#;

// Dialect twin of sqlite/retention.rs `impl RetentionStore for SqliteStore`: the same
// victims and tombstones (one CTE with `SKIP LOCKED` here, three statements there); only
// PostgreSQL has anything to reclaim.
#[async_trait]
impl RetentionStore for PgStore {
    async fn prune_finished(
        &self,
        finished_before: DateTime<Utc>,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<u64, StoreError> {
        let n: i64 = sqlx::query_scalar(PRUNE_SQL)
            .bind(finished_before)
            .bind(i64::from(limit.max(1)))
            .bind(now)
            .fetch_one(&self.pool)
            .await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn prune_tombstones(
        &self,
        finished_before: DateTime<Utc>,
        limit: u32,
    ) -> Result<u64, StoreError> {
        let done = sqlx::query(EXPIRE_TOMBSTONES_SQL)
            .bind(finished_before)
            .bind(i64::from(limit.max(1)))
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }

    async fn reclaim(&self, tables: &[PrunedTable]) -> Result<Reclaim, StoreError> {
        let mut conn = self.pool.acquire().await?;
        let names: Vec<&str> = tables.iter().map(|t| t.table()).collect();
        let permitted: Vec<(String, bool)> = sqlx::query_as(MAY_VACUUM_SQL)
            .bind(&names)
            .fetch_all(&mut *conn)
            .await?;
        let may = |t: &PrunedTable| permitted.iter().any(|(n, ok)| n == t.table() && *ok);
        let (vacuumed, not_permitted): (Vec<PrunedTable>, Vec<PrunedTable>) =
            tables.iter().partition(|t| may(t));
        if !vacuumed.is_empty() {
            let list: Vec<&str> = vacuumed.iter().map(|t| t.table()).collect();
            // Not in a transaction block (VACUUM refuses one): a plain statement on a pool
            // connection. SKIP_LOCKED: a table autovacuum is working on is left to it.
            let vacuum = format!("VACUUM (ANALYZE, SKIP_LOCKED) {}", list.join(", "));
            sqlx::raw_sql(AssertSqlSafe(vacuum))
                .execute(&mut *conn)
                .await?;
        }
        Ok(Reclaim::Vacuumed {
            vacuumed,
            not_permitted,
        })
    }
}
