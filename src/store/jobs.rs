//! The few statements the scheduled jobs need beyond the store's role traits
//! ([`crate::store::roles`]): the PostgreSQL advisory lock that keeps each job on one
//! replica at a time ([`JobLock`]), and the read-only counts behind
//! `outboxd prune --dry-run` ([`retention_preview`]). Every change to intents, items and
//! tombstones still goes through the store.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::AssertSqlSafe;
use sqlx::{Connection, PgConnection};

use super::sqlite::ms;
use super::Database;

/// A scheduled job that must run on one replica at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Job {
    /// The status probe job.
    Probes,
    /// The retention (pruning) job.
    Retention,
}

impl Job {
    /// The job's name in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Job::Probes => "probes",
            Job::Retention => "retention",
        }
    }

    /// The first half of the two-part advisory lock key ("obx" + a job number); the second
    /// half is `hashtext(current_schema())` (`schema_lock_half!`), so outboxd installs in different schemas of one
    /// database do not block each other.
    fn lock_class(self) -> i32 {
        match self {
            Job::Probes => 0x6f62_7801,
            Job::Retention => 0x6f62_7802,
        }
    }
}

/// Tries the session-level advisory lock of a job.
const TRY_LOCK_SQL: &str = concat!(
    "SELECT pg_catalog.pg_try_advisory_lock($1, ",
    super::postgres::schema_lock_half!(),
    ")"
);
/// Releases it; false if this session did not hold it.
const UNLOCK_SQL: &str = concat!(
    "SELECT pg_catalog.pg_advisory_unlock($1, ",
    super::postgres::schema_lock_half!(),
    ")"
);

/// The right to run a job now. On PostgreSQL it holds `pg_try_advisory_lock` on a
/// session of its own, detached from the pool before the try-lock; on SQLite (one
/// dispatcher per file) it holds nothing.
///
/// Release it with [`JobLock::release`]. If it is dropped instead (a panic, a cancelled
/// task), the session is closed, which frees the lock. Because the session never belongs
/// to the pool, not even while the try-lock is in flight, a cancelled acquisition cannot
/// hand a locked connection back to the pool.
#[derive(Debug)]
pub struct JobLock {
    job: Job,
    conn: Option<PgConnection>,
}

impl JobLock {
    /// Takes the job's lock if no other session holds it; `None` means another replica is
    /// running the job right now. Fails only if the database does.
    pub async fn try_acquire(db: &Database, job: Job) -> Result<Option<JobLock>, sqlx::Error> {
        let pool = match db {
            Database::Sqlite(_) => return Ok(Some(JobLock { job, conn: None })),
            Database::Postgres(pool) => pool,
        };
        let mut conn = pool.acquire().await?.detach();
        let acquired: bool = sqlx::query_scalar(TRY_LOCK_SQL)
            .bind(job.lock_class())
            .fetch_one(&mut conn)
            .await?;
        if !acquired {
            let _ = conn.close().await;
            return Ok(None);
        }
        Ok(Some(JobLock {
            job,
            conn: Some(conn),
        }))
    }

    /// The job this lock is for.
    pub fn job(&self) -> Job {
        self.job
    }

    /// Releases the lock and closes its session (closing frees the lock even if
    /// unlocking failed; the error is returned then).
    pub async fn release(mut self) -> Result<(), sqlx::Error> {
        let Some(mut conn) = self.conn.take() else {
            return Ok(());
        };
        let unlocked: Result<bool, sqlx::Error> = sqlx::query_scalar(UNLOCK_SQL)
            .bind(self.job.lock_class())
            .fetch_one(&mut conn)
            .await;
        let _ = conn.close().await;
        match unlocked {
            Ok(true) => Ok(()),
            Ok(false) => {
                tracing::warn!(
                    job = self.job.as_str(),
                    "the job's advisory lock was not held at release"
                );
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

impl Drop for JobLock {
    fn drop(&mut self) {
        // Dropping the session closes it, which frees its lock without awaiting.
        drop(self.conn.take());
    }
}

/// What a retention run would remove now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RetentionPreview {
    /// Finished intents (delivered, failed, cancelled, abandoned) older than the window.
    pub prunable_intents: i64,
    /// Tombstones past their own window, counting those the pruning itself would create
    /// for intents that finished before the tombstone window.
    pub expirable_tombstones: i64,
}

const PRUNABLE_SQL: &str = "SELECT count(*) FROM outbox_intents WHERE finished_at < $1 \
    AND state IN ('delivered', 'failed', 'cancelled', 'abandoned')";
const EXPIRABLE_SQL: &str =
    "SELECT count(*) FROM outbox_tombstones WHERE coalesce(finished_at, pruned_at) < $1";

/// Counts what a retention run with these cut-offs would remove; changes nothing.
pub async fn retention_preview(
    db: &Database,
    finished_before: DateTime<Utc>,
    tombstones_before: DateTime<Utc>,
) -> Result<RetentionPreview, sqlx::Error> {
    let sqlite_sql = |sql: &str| sql.replace("$1", "?1");
    let (prunable, prunable_old, expirable): (i64, i64, i64) = match db {
        Database::Postgres(pool) => {
            let count = |sql: &'static str, at: DateTime<Utc>| {
                sqlx::query_scalar::<_, i64>(sql).bind(at).fetch_one(pool)
            };
            (
                count(PRUNABLE_SQL, finished_before).await?,
                count(PRUNABLE_SQL, tombstones_before.min(finished_before)).await?,
                count(EXPIRABLE_SQL, tombstones_before).await?,
            )
        }
        Database::Sqlite(pool) => {
            let prunable = sqlite_sql(PRUNABLE_SQL);
            let expirable = sqlite_sql(EXPIRABLE_SQL);
            let count = |sql: &str, at: DateTime<Utc>| {
                let sql = sql.to_owned();
                async move {
                    sqlx::query_scalar::<_, i64>(AssertSqlSafe(sql))
                        .bind(ms(at))
                        .fetch_one(pool)
                        .await
                }
            };
            (
                count(&prunable, finished_before).await?,
                count(&prunable, tombstones_before.min(finished_before)).await?,
                count(&expirable, tombstones_before).await?,
            )
        }
    };
    Ok(RetentionPreview {
        prunable_intents: prunable,
        expirable_tombstones: expirable + prunable_old,
    })
}
