//! Test databases. SQLite: a file in a fresh temp dir. PostgreSQL: a fresh schema in the
//! database named by `OUTBOXD_TEST_PG_URL` (default `postgres://postgres@127.0.0.1:5432/test`),
//! selected through the connection's `search_path`, dropped on `Drop` (or, for a test whose
//! outcome depends on other sessions' open transactions, a database of its own:
//! [`TestDb::postgres_own_database`]).
//!
//! When PostgreSQL is unreachable the test fails, unless skipping is allowed outside CI
//! (`OUTBOXD_ALLOW_SKIP=1`, and neither `CI=true` nor `OUTBOXD_REQUIRE_POSTGRES=1`); a
//! skip is then written straight to the terminal's stderr, past libtest's output capture,
//! so a green run cannot hide it.
//!
//! Schema and database names carry their creation time (`obxt_t<unix seconds>_…`), so a
//! cleanup of those left behind by interrupted runs can drop only old ones and never a
//! concurrent run's (see `scripts/test.sh`).

use sqlx::AssertSqlSafe;
use std::sync::atomic::{AtomicU32, Ordering};

use outboxd::store::{connect, Database};

const DEFAULT_PG_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A migrated database owned by one test.
pub struct TestDb {
    /// The URL the daemon or a new pool can use to reach exactly this database.
    pub url: String,
    /// An open pool.
    pub db: Database,
    schema: Option<String>,
    /// A database of its own ([`TestDb::postgres_own_database`]), dropped on `Drop`.
    database: Option<String>,
    base_url: String,
    _dir: Option<tempfile::TempDir>,
}

fn pg_base_url() -> String {
    std::env::var("OUTBOXD_TEST_PG_URL").unwrap_or_else(|_| DEFAULT_PG_URL.to_owned())
}

fn env_is(name: &str, value: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v.eq_ignore_ascii_case(value))
}

/// CI, or an explicit demand: PostgreSQL must be there and new enough.
pub fn require_postgres() -> bool {
    env_is("OUTBOXD_REQUIRE_POSTGRES", "1") || env_is("CI", "true") || env_is("CI", "1")
}

/// Whether a test may skip for want of PostgreSQL (or a new enough one): only when
/// `OUTBOXD_ALLOW_SKIP=1` and not [`require_postgres`].
pub fn skip_allowed() -> bool {
    env_is("OUTBOXD_ALLOW_SKIP", "1") && !require_postgres()
}

/// Skips loudly (straight to stderr, past libtest's capture) when skipping is allowed;
/// otherwise fails the test with `why`.
pub fn skip_or_fail(why: &str) {
    use std::io::Write;
    assert!(
        skip_allowed(),
        "{why} (set OUTBOXD_ALLOW_SKIP=1 to skip instead; never allowed with CI=true or OUTBOXD_REQUIRE_POSTGRES=1)"
    );
    let test = std::thread::current().name().unwrap_or("a test").to_owned();
    let _ = writeln!(std::io::stderr(), "!!! SKIPPED {test}: {why}");
    super::record_skip(why);
}

pub fn unique_name(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!(
        "{prefix}_t{created}_{}_{n}_{}",
        std::process::id(),
        rand::random::<u32>()
    )
}

impl TestDb {
    /// A fresh SQLite file, migrated.
    pub async fn sqlite() -> TestDb {
        Self::sqlite_at(outboxd::store::migrate::expected_version()).await
    }

    /// A fresh SQLite file, migrated up to schema `version` (an older schema, for upgrade
    /// tests).
    pub async fn sqlite_at(version: i64) -> TestDb {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}", dir.path().join("outbox.db").display());
        let db = connect(&url, 8).await.expect("open sqlite");
        let Database::Sqlite(pool) = &db else {
            unreachable!()
        };
        outboxd::store::migrate::migrate_sqlite_to(pool, version)
            .await
            .expect("migrate sqlite");
        TestDb {
            url,
            db,
            schema: None,
            database: None,
            base_url: String::new(),
            _dir: Some(dir),
        }
    }

    /// A fresh PostgreSQL schema, migrated; `None` when PostgreSQL is unavailable and not
    /// required.
    pub async fn postgres() -> Option<TestDb> {
        Self::postgres_at(outboxd::store::migrate::expected_version()).await
    }

    /// A fresh PostgreSQL schema, migrated up to schema `version`.
    pub async fn postgres_at(version: i64) -> Option<TestDb> {
        let base_url = pg_base_url();
        let admin = match connect(&base_url, 2).await {
            Ok(admin) => admin,
            Err(e) => {
                skip_or_fail(&format!(
                    "PostgreSQL unavailable at {base_url} ({e}): the PostgreSQL half of this test did not run"
                ));
                return None;
            }
        };
        let schema = unique_name("obxt");
        let Database::Postgres(pool) = &admin else {
            unreachable!()
        };
        sqlx::query(AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
            .execute(pool)
            .await
            .expect("create schema");
        admin.close().await;
        let sep = if base_url.contains('?') { '&' } else { '?' };
        let url = format!("{base_url}{sep}options=-c%20search_path%3D{schema}");
        let db = connect(&url, 8).await.expect("open postgres schema");
        let Database::Postgres(pool) = &db else {
            unreachable!()
        };
        outboxd::store::migrate::migrate_postgres_to(pool, version)
            .await
            .expect("migrate postgres");
        Some(TestDb {
            url,
            db,
            schema: Some(schema),
            database: None,
            base_url,
            _dir: None,
        })
    }

    /// A fresh PostgreSQL *database* on the test server, migrated, for a test whose result
    /// depends on what other sessions do: a `VACUUM` cannot remove rows that a transaction
    /// open anywhere in the same database might still see, so tests (or other runs) using
    /// schemas of the shared database would make its outcome vary. Other databases do not
    /// hold its horizon back. Dropped on `Drop` (`WITH (FORCE)`).
    pub async fn postgres_own_database() -> Option<TestDb> {
        let base_url = pg_base_url();
        let admin = match connect(&base_url, 1).await {
            Ok(admin) => admin,
            Err(e) => {
                skip_or_fail(&format!(
                    "PostgreSQL unavailable at {base_url} ({e}): the PostgreSQL half of this test did not run"
                ));
                return None;
            }
        };
        let name = unique_name("obxt");
        let Database::Postgres(pool) = &admin else {
            unreachable!()
        };
        sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(pool)
            .await
            .expect("create database");
        admin.close().await;
        let (head, query) = base_url.split_once('?').unwrap_or((&base_url, ""));
        let server = head.rsplit_once('/').map_or(head, |(server, _)| server);
        let url = if query.is_empty() {
            format!("{server}/{name}")
        } else {
            format!("{server}/{name}?{query}")
        };
        let db = connect(&url, 8).await.expect("open own database");
        let Database::Postgres(pool) = &db else {
            unreachable!()
        };
        outboxd::store::migrate::migrate_postgres_to(
            pool,
            outboxd::store::migrate::expected_version(),
        )
        .await
        .expect("migrate postgres");
        Some(TestDb {
            url,
            db,
            schema: None,
            database: Some(name),
            base_url,
            _dir: None,
        })
    }

    /// The PostgreSQL schema of this test (`None` on SQLite or for a database of its own).
    pub fn schema(&self) -> Option<&str> {
        self.schema.as_deref()
    }

    /// A URL of this test's PostgreSQL database whose sessions search `schemas` (in order).
    pub fn url_searching(&self, schemas: &[&str]) -> String {
        let sep = if self.base_url.contains('?') {
            '&'
        } else {
            '?'
        };
        let path = schemas.join("%2C");
        format!("{}{sep}options=-c%20search_path%3D{path}", self.base_url)
    }

    /// A new pool on the same database, as a restarted process would open.
    pub async fn reopen(&self, max_connections: u32) -> Database {
        connect(&self.url, max_connections)
            .await
            .expect("reopen database")
    }

    /// A plain PostgreSQL pool on this database whose every session runs as `role` (`SET
    /// ROLE` on connect): what a producer or operator with that role's rights would see.
    pub async fn pool_as_role(&self, role: &'static str, max_connections: u32) -> sqlx::PgPool {
        sqlx::postgres::PgPoolOptions::new()
            .max_connections(max_connections)
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    sqlx::query(AssertSqlSafe(format!("SET ROLE {role}")))
                        .execute(conn)
                        .await
                        .map(|_| ())
                })
            })
            .connect(&self.url)
            .await
            .unwrap_or_else(|e| panic!("a pool as {role}: {e}"))
    }

    /// Which backend this is.
    pub fn backend(&self) -> &'static str {
        self.db.backend_name()
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let drop_sql = match (self.schema.take(), self.database.take()) {
            (Some(schema), _) => format!("DROP SCHEMA IF EXISTS {schema} CASCADE"),
            (None, Some(database)) => format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"),
            (None, None) => return,
        };
        let base_url = self.base_url.clone();
        // Drop runs inside a test's runtime: clean up on a thread with its own runtime.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            if let Ok(rt) = rt {
                rt.block_on(async {
                    if let Ok(Database::Postgres(pool)) = connect(&base_url, 1).await {
                        let _ = sqlx::query(AssertSqlSafe(drop_sql)).execute(&pool).await;
                        pool.close().await;
                    }
                });
            }
        })
        .join();
    }
}
