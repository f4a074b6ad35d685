//! A fresh database for each measurement (a PostgreSQL schema of its own, or a temporary
//! SQLite file), and fast seeding of intents straight into the outbox table.

use sqlx::AssertSqlSafe;
use std::path::PathBuf;

use chrono::{DateTime, Utc};
use outboxd::store::{connect, Database};
use sqlx::{Connection, PgConnection};

use super::BenchError;

/// Whether the benchmark targets PostgreSQL.
pub fn is_postgres(database: &str) -> bool {
    database.starts_with("postgres")
}

/// A migrated, empty database owned by one measurement; dropped by [`BenchDb::drop_now`].
pub struct BenchDb {
    /// URL that reaches exactly this database (for the daemon).
    pub url: String,
    /// An open pool.
    pub db: Database,
    schema: Option<(String, String)>,
    file: Option<PathBuf>,
}

impl BenchDb {
    /// Creates it.
    pub async fn create(database: &str, label: &str) -> Result<BenchDb, BenchError> {
        let name = format!("obxbench_{label}_{}", std::process::id());
        if is_postgres(database) {
            let admin = connect(database, 2).await?;
            if let Database::Postgres(pool) = &admin {
                sqlx::query(AssertSqlSafe(format!(
                    "DROP SCHEMA IF EXISTS {name} CASCADE"
                )))
                .execute(pool)
                .await?;
                sqlx::query(AssertSqlSafe(format!("CREATE SCHEMA {name}")))
                    .execute(pool)
                    .await?;
            }
            admin.close().await;
            let sep = if database.contains('?') { '&' } else { '?' };
            let url = format!("{database}{sep}options=-c%20search_path%3D{name}");
            let db = connect(&url, 16).await?;
            db.migrate().await?;
            Ok(BenchDb {
                url,
                db,
                schema: Some((database.to_owned(), name)),
                file: None,
            })
        } else {
            let file = std::env::temp_dir().join(format!("{name}.db"));
            remove_sqlite(&file);
            let url = format!("sqlite://{}", file.display());
            let db = connect(&url, 4).await?;
            db.migrate().await?;
            Ok(BenchDb {
                url,
                db,
                schema: None,
                file: Some(file),
            })
        }
    }

    /// Drops the schema or deletes the file.
    pub async fn drop_now(self) {
        self.db.close().await;
        if let Some((base, name)) = &self.schema {
            if let Ok(Database::Postgres(pool)) = connect(base, 1).await {
                let _ = sqlx::query(AssertSqlSafe(format!(
                    "DROP SCHEMA IF EXISTS {name} CASCADE"
                )))
                .execute(&pool)
                .await;
            }
        }
        if let Some(file) = &self.file {
            remove_sqlite(file);
        }
    }
}

fn remove_sqlite(file: &std::path::Path) {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", file.display()));
    }
}

/// The action every seeded intent carries.
pub const ACTION: &str = "bench_refund";

/// Seeds `count` intents in `state` (`pending` and due now, or `delivered` and finished),
/// with ids after `offset`, each with a ~200-byte payload.
pub async fn seed(
    db: &Database,
    count: usize,
    offset: usize,
    state: &str,
) -> Result<(), BenchError> {
    seed_for(db, count, offset, state, "bench", ACTION).await
}

/// [`seed`] for a given tenant and action (operation ids `op-<n>` must not repeat within
/// a tenant: give each call its own range through `offset`).
pub async fn seed_for(
    db: &Database,
    count: usize,
    offset: usize,
    state: &str,
    tenant: &str,
    action: &str,
) -> Result<(), BenchError> {
    const CHUNK: usize = 50_000;
    let mut done = 0;
    while done < count {
        let n = CHUNK.min(count - done);
        let (from, to) = ((offset + done + 1) as i64, (offset + done + n) as i64);
        match db {
            Database::Postgres(pool) => {
                sqlx::query(
                    "INSERT INTO outbox_intents (tenant, operation_id, action, payload, payload_sha256, \
                     idempotency_key, state, next_attempt_at, created_at, finished_at, attempt_count) \
                     SELECT $5, 'op-' || g, $3, jsonb_build_object('n', g, 'amount', 1250, 'note', repeat('x', 160)), \
                     encode(sha256(convert_to('op-' || g, 'UTF8')), 'hex'), 'key-' || g, $4, now(), now(), \
                     CASE WHEN $4 = 'delivered' THEN now() END, CASE WHEN $4 = 'delivered' THEN 1 ELSE 0 END \
                     FROM generate_series($1::bigint, $2::bigint) g",
                )
                .bind(from)
                .bind(to)
                .bind(action)
                .bind(state)
                .bind(tenant)
                .execute(pool)
                .await?;
            }
            Database::Sqlite(pool) => {
                sqlx::query(
                    "WITH RECURSIVE g(n) AS (SELECT ?1 UNION ALL SELECT n + 1 FROM g WHERE n < ?2) \
                     INSERT INTO outbox_intents (tenant, operation_id, action, payload, payload_sha256, \
                     idempotency_key, state, next_attempt_at, created_at, updated_at, finished_at, attempt_count) \
                     SELECT ?6, 'op-' || n, ?3, json_object('n', n, 'amount', 1250, 'note', printf('%.160c', 'x')), \
                     lower(hex(randomblob(32))), 'key-' || n, ?4, ?5, ?5, ?5, \
                     CASE WHEN ?4 = 'delivered' THEN ?5 END, CASE WHEN ?4 = 'delivered' THEN 1 ELSE 0 END FROM g",
                )
                .bind(from)
                .bind(to)
                .bind(action)
                .bind(state)
                .bind(chrono::Utc::now().timestamp_millis())
                .bind(tenant)
                .execute(pool)
                .await?;
            }
        }
        done += n;
    }
    if let Database::Postgres(pool) = db {
        sqlx::query("ANALYZE outbox_intents").execute(pool).await?;
    }
    Ok(())
}

/// Inserts `count` delivered rows with the schema's triggers off for this session only
/// (`session_replication_role = replica`; the rows are what the dispatcher leaves, so
/// nothing the triggers check is at stake), a million per statement.
pub(super) async fn seed_finished_fast(url: &str, count: usize) -> Result<(), BenchError> {
    const CHUNK: usize = 1_000_000;
    let mut conn = PgConnection::connect(url).await?;
    sqlx::query("SET session_replication_role = replica")
        .execute(&mut conn)
        .await?;
    let at = Utc::now() - chrono::Duration::hours(1);
    let mut done = 0;
    while done < count {
        let n = CHUNK.min(count - done);
        insert_finished(&mut conn, done, n, at).await?;
        done += n;
    }
    sqlx::query("ANALYZE outbox_intents")
        .execute(&mut conn)
        .await?;
    conn.close().await?;
    Ok(())
}

/// Inserts `count` delivered intents finished at `at`, ids after `offset`.
pub(super) async fn insert_finished<'c>(
    pool: impl sqlx::PgExecutor<'c>,
    offset: usize,
    count: usize,
    at: DateTime<Utc>,
) -> Result<(), BenchError> {
    sqlx::query(
        "INSERT INTO outbox_intents (tenant, operation_id, action, payload, payload_sha256, \
         idempotency_key, state, next_attempt_at, created_at, finished_at, attempt_count) \
         SELECT 'bench', 'op-' || g, $3, jsonb_build_object('n', g, 'amount', 1250, 'note', repeat('x', 160)), \
         encode(sha256(convert_to('op-' || g, 'UTF8')), 'hex'), 'key-' || g, 'delivered', $4, $4, $4, 1 \
         FROM generate_series($1::bigint, $2::bigint) g",
    )
    .bind((offset + 1) as i64)
    .bind((offset + count) as i64)
    .bind(ACTION)
    .bind(at)
    .execute(pool)
    .await?;
    Ok(())
}
