//! Opening the database named by a URL: `sqlite://path` (the embedded default) or
//! `postgres://...` (production, shared by many replicas).
//!
//! Only `outboxd migrate` and `outboxd run` may create a SQLite file ([`OpenMode::Create`]);
//! every other command opens an existing one ([`OpenMode::Existing`]), read-only when it
//! only reads ([`OpenMode::ReadOnly`]), and a missing file is [`ConnectError::Missing`]
//! with the resolved path.
//!
//! On PostgreSQL the dispatcher's claims and outcome groups get sessions of their own
//! beside the pool ([`DispatcherSessions`](super::postgres::DispatcherSessions)), opened
//! like the pool's connections with the settings their kept plans need.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection, PgConnection, PgPool, SqlitePool};

use super::migrate::{self, MigrateError, MigrateReport};
use super::postgres::refuse_catalog_not_first;
pub use super::postgres::CatalogNotFirst;

pub use crate::config::{DatabaseUrl, UnsupportedScheme};

/// An open connection pool of either backend.
#[derive(Debug, Clone)]
pub enum Database {
    /// PostgreSQL.
    Postgres(PgPool),
    /// SQLite.
    Sqlite(SqlitePool),
}

/// How a command opens the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Read and write; create a missing SQLite file (`migrate`, `run`).
    Create,
    /// Read and write an existing database; a missing SQLite file is an error.
    Existing,
    /// Read only, an existing database; a missing SQLite file is an error.
    ReadOnly,
}

/// Who a pool serves, which decides how it is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PoolRole {
    /// The daemon: filled at start and kept, sessions end transactions left idle
    /// ([`connect_dispatcher`]).
    Dispatcher,
    /// A command or a library caller: grows on demand.
    Command,
}

impl PoolRole {
    /// How long a connection may sit idle, and live, before the pool closes it: forever
    /// for the daemon (its pool is filled at start and kept), sqlx's defaults otherwise.
    fn expiry(self) -> (Option<Duration>, Option<Duration>) {
        match self {
            PoolRole::Dispatcher => (None, None),
            PoolRole::Command => (
                Some(Duration::from_secs(600)),
                Some(Duration::from_secs(1800)),
            ),
        }
    }
}

/// A snapshot of the connection pool, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Connections open now (idle or in use).
    pub open: u32,
    /// Idle connections.
    pub idle: u32,
    /// The pool's maximum.
    pub max: u32,
}

/// Why the database could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The URL is neither `postgres://` nor `sqlite:`.
    #[error(transparent)]
    UnsupportedScheme(#[from] UnsupportedScheme),
    /// The SQLite file does not exist (and this command does not create it).
    #[error("no database file at {}; check database.url, or run `outboxd migrate` to create it", .path.display())]
    Missing {
        /// The file, resolved against the working directory.
        path: PathBuf,
    },
    /// The URL could not be parsed or the server could not be reached.
    #[error("cannot open database {url}: {source}")]
    Open {
        /// The URL with any password removed.
        url: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// The sessions' `search_path` names `pg_catalog` after another schema.
    #[error(transparent)]
    CatalogNotFirst(#[from] CatalogNotFirst),
    /// The daemon's pool could not be filled (`database.max_connections` more than the
    /// server grants).
    #[error("database {url}: opened {open} of the {wanted} connections of database.max_connections within the connect timeout (last error: {source}); lower database.max_connections, or on PostgreSQL raise the server's max_connections or this role's connection limit")]
    PoolShort {
        /// The URL with any password removed.
        url: String,
        /// Connections opened.
        open: u32,
        /// `database.max_connections`.
        wanted: u32,
        /// The driver's last error.
        #[source]
        source: sqlx::Error,
    },
}

/// Hides every password in a database URL for error messages and logs: the userinfo
/// password (`user:password@`) and `password=` / `sslpassword=` query parameters. The one
/// rule lives in [`crate::config::redact_url_password`]; this is its name for store code.
pub fn redact_url(url: &str) -> String {
    crate::config::redact_url_password(url)
}

/// `url` without `sslpassword` query parameters: the driver does not support them and
/// would log the ignored parameter *with its value*. Warns (without the value) instead.
fn without_unsupported_secrets(url: &str) -> String {
    let Some((base, query)) = url.split_once('?') else {
        return url.to_owned();
    };
    let (query, fragment) = query.split_at(query.find('#').unwrap_or(query.len()));
    let (dropped, kept): (Vec<&str>, Vec<&str>) = query.split('&').partition(|param| {
        let name = param.split('=').next().unwrap_or_default();
        name.eq_ignore_ascii_case("sslpassword")
    });
    if dropped.is_empty() {
        return url.to_owned();
    }
    tracing::warn!(
        "database.url: sslpassword is not supported by the PostgreSQL driver and is ignored"
    );
    if kept.is_empty() {
        format!("{base}{fragment}")
    } else {
        format!("{base}?{}{fragment}", kept.join("&"))
    }
}

/// How long a PostgreSQL session of the dispatcher may sit idle inside a transaction before
/// the server ends it ([`connect_dispatcher`]). outboxd's own transactions never wait on
/// the client for long; a process stopped (SIGSTOP, a frozen VM) inside one would otherwise
/// hold its row locks, and replicas claiming with `SKIP LOCKED` could not take its
/// intents over until it resumed.
pub const DISPATCHER_IDLE_IN_TRANSACTION: Duration = Duration::from_secs(15);

/// Opens a pool of at most `max_connections` (creating a missing SQLite file).
pub async fn connect(url: &str, max_connections: u32) -> Result<Database, ConnectError> {
    open(url, max_connections, PoolRole::Command, OpenMode::Create).await
}

/// Opens the daemon's pool: like [`connect`], and on PostgreSQL each session ends any
/// transaction left idle for [`DISPATCHER_IDLE_IN_TRANSACTION`].
///
/// The pool is filled before this returns, all connections at once, and keeps them: the
/// pool closes none for being idle or old (a broken one is replaced when next needed).
/// Opening a PostgreSQL connection costs far more than a statement (with a server that
/// offers TLS, the handshake took about 90 ms on loopback, where a claim takes about 1 ms),
/// and a pool that grows on demand opens them in the middle of the work: in the latency
/// benchmark at 1,000 intents/s, claims that had to open a connection waited 89–93 ms,
/// several times per run, and set the p99. When the server refuses some of them (its own
/// `max_connections` reached), the daemon does not start: every claim or write that found
/// no idle connection would then wait out the acquire timeout ([`ConnectError::PoolShort`]).
pub async fn connect_dispatcher(url: &str, max_connections: u32) -> Result<Database, ConnectError> {
    let db = open(url, max_connections, PoolRole::Dispatcher, OpenMode::Create).await?;
    let filled = db.fill_pool().await;
    match filled.error {
        None => Ok(db),
        Some(source) => {
            db.close().await;
            Err(ConnectError::PoolShort {
                url: redact_url(url),
                open: filled.open,
                wanted: max_connections,
                source,
            })
        }
    }
}

/// What [`Database::fill_pool`] got.
struct Filled {
    open: u32,
    error: Option<sqlx::Error>,
}

/// Opens a pool for an operator command in `mode`: an existing SQLite file only (read-only
/// with [`OpenMode::ReadOnly`]); PostgreSQL as usual.
pub async fn connect_with_mode(
    url: &str,
    max_connections: u32,
    mode: OpenMode,
) -> Result<Database, ConnectError> {
    open(url, max_connections, PoolRole::Command, mode).await
}

/// Where `url` points, for messages: the absolute path of a SQLite file, or the URL with
/// any password removed.
pub fn describe_location(url: &str) -> String {
    match DatabaseUrl::parse(url) {
        Ok(DatabaseUrl::Sqlite(sqlite)) => match SqliteConnectOptions::from_str(&sqlite) {
            Ok(options) if !sqlite.starts_with("sqlite::memory:") => {
                resolved_path(options.get_filename()).display().to_string()
            }
            _ => sqlite,
        },
        _ => redact_url(url),
    }
}

/// `path` made absolute against the working directory, for messages.
fn resolved_path(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

async fn open(
    url: &str,
    max_connections: u32,
    role: PoolRole,
    mode: OpenMode,
) -> Result<Database, ConnectError> {
    let open_err = |source| ConnectError::Open {
        url: redact_url(url),
        source,
    };
    match DatabaseUrl::parse(url)? {
        DatabaseUrl::Postgres(url) => {
            let url = without_unsupported_secrets(&url);
            let mut options = PgConnectOptions::from_str(&url).map_err(open_err)?;
            if role == PoolRole::Dispatcher {
                let millis = DISPATCHER_IDLE_IN_TRANSACTION.as_millis().to_string();
                options = options.options([("idle_in_transaction_session_timeout", millis)]);
            }
            let (idle, lifetime) = role.expiry();
            // Once on a connection of its own first: an error in the pool's hook below only
            // shows as the pool's timeout.
            let mut first = PgConnection::connect_with(&options)
                .await
                .map_err(open_err)?;
            let checked = refuse_catalog_not_first(&mut first, redact_url(&url)).await;
            let _ = first.close().await;
            checked.map_err(|e| match e {
                sqlx::Error::Configuration(inner) => match inner.downcast::<CatalogNotFirst>() {
                    Ok(refused) => ConnectError::CatalogNotFirst(*refused),
                    Err(inner) => open_err(sqlx::Error::Configuration(inner)),
                },
                e => open_err(e),
            })?;
            let checked_url = redact_url(&url);
            let pool = PgPoolOptions::new()
                .after_connect(move |conn, _| {
                    let url = checked_url.clone();
                    Box::pin(async move { refuse_catalog_not_first(conn, url).await })
                })
                .max_connections(max_connections.max(2))
                .idle_timeout(idle)
                .max_lifetime(lifetime)
                .acquire_timeout(Duration::from_secs(10))
                .connect_with(options)
                .await
                .map_err(open_err)?;
            Ok(Database::Postgres(pool))
        }
        DatabaseUrl::Sqlite(url) => {
            let options = SqliteConnectOptions::from_str(&url)
                .map_err(open_err)?
                .create_if_missing(mode == OpenMode::Create)
                .foreign_keys(true)
                .busy_timeout(Duration::from_secs(10));
            let in_memory = url.starts_with("sqlite::memory:") || url.contains("mode=memory");
            if mode != OpenMode::Create && !in_memory && !options.get_filename().exists() {
                return Err(ConnectError::Missing {
                    path: resolved_path(options.get_filename()),
                });
            }
            let (idle, lifetime) = role.expiry();
            let pool_options = SqlitePoolOptions::new()
                .max_connections(max_connections.max(1))
                .idle_timeout(idle)
                .max_lifetime(lifetime)
                .acquire_timeout(Duration::from_secs(10));
            if mode != OpenMode::ReadOnly {
                let options = options
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Full);
                let pool = pool_options.connect_with(options).await.map_err(open_err)?;
                return Ok(Database::Sqlite(pool));
            }
            // Read-only. A connection opened with SQLITE_OPEN_READONLY on a WAL database
            // creates `-wal` and `-shm` beside it and, unable to checkpoint, leaves them
            // there after a stopped daemon's clean close. So open read-write without
            // creating and refuse every write with `query_only`: the last connection to
            // close then checkpoints and removes them, as the daemon's would. Only a file
            // this user may not write is opened truly read-only (and may leave them). The
            // journal mode is a property of the file (WAL, set when it was created); a
            // reader neither needs nor sets it.
            let query_only = options.clone().pragma("query_only", "ON");
            match pool_options.clone().connect_with(query_only).await {
                Ok(pool) => Ok(Database::Sqlite(pool)),
                Err(_) => {
                    let pool = pool_options
                        .connect_with(options.read_only(true))
                        .await
                        .map_err(open_err)?;
                    Ok(Database::Sqlite(pool))
                }
            }
        }
    }
}

impl Database {
    /// A connection listening on the NOTIFY `channel` (PostgreSQL); `Ok(None)` on SQLite,
    /// which has no notifications.
    pub async fn listen(&self, channel: &str) -> Result<Option<PgListener>, sqlx::Error> {
        match self {
            Database::Postgres(pool) => {
                let mut listener = PgListener::connect_with(pool).await?;
                listener.listen(channel).await?;
                Ok(Some(listener))
            }
            Database::Sqlite(_) => Ok(None),
        }
    }

    /// The schema whose `outbox_intents` this pool's sessions use (PostgreSQL: as their
    /// `search_path` resolves it; `None` on SQLite, or before the table exists). Wake-up
    /// notifications name it (migration 0007).
    pub async fn outbox_schema(&self) -> Result<Option<String>, sqlx::Error> {
        match self {
            Database::Postgres(pool) => {
                sqlx::query_scalar(super::postgres::OUTBOX_SCHEMA_SQL)
                    .fetch_optional(pool)
                    .await
            }
            Database::Sqlite(_) => Ok(None),
        }
    }

    /// Roles other than its owner that may create objects in outboxd's schema (PostgreSQL;
    /// none on SQLite), as [`migrate::postgres_schema_creators`] says.
    pub async fn schema_creators(&self) -> Result<Vec<String>, sqlx::Error> {
        match self {
            Database::Postgres(pool) => migrate::postgres_schema_creators(pool).await,
            Database::Sqlite(_) => Ok(Vec::new()),
        }
    }

    /// The warning to give when [`Database::schema_creators`] names roles: what they can
    /// do and the statement that stops it.
    pub fn schema_creators_warning(creators: &[String]) -> Option<String> {
        if creators.is_empty() {
            return None;
        }
        Some(format!(
            "roles other than its owner may create objects in outboxd's schema ({}): an object created there (a function or aggregate that outbids a built-in) can run with the rights of any session that searches the schema, outboxd's own included; revoke it (for example REVOKE CREATE ON SCHEMA <schema> FROM {}) or install outboxd in a schema of its own",
            creators.join(", "),
            creators.join(", ")
        ))
    }

    /// Applies pending migrations (refusing, on PostgreSQL, a schema other roles may
    /// create objects in: [`migrate::MigrateOptions`]).
    pub async fn migrate(&self) -> Result<MigrateReport, MigrateError> {
        self.migrate_with(migrate::MigrateOptions::default()).await
    }

    /// Applies pending migrations as `options` allow.
    pub async fn migrate_with(
        &self,
        options: migrate::MigrateOptions,
    ) -> Result<MigrateReport, MigrateError> {
        let expected = migrate::expected_version();
        match self {
            Database::Postgres(pool) => {
                migrate::migrate_postgres_with(pool, expected, options).await
            }
            Database::Sqlite(pool) => migrate::migrate_sqlite(pool).await,
        }
    }

    /// The highest applied schema version (0 before the first migration).
    pub async fn schema_version(&self) -> Result<i64, sqlx::Error> {
        match self {
            Database::Postgres(pool) => migrate::current_version_postgres(pool).await,
            Database::Sqlite(pool) => migrate::current_version_sqlite(pool).await,
        }
    }

    /// The connection pool now: (open connections, idle ones, the configured maximum).
    pub fn pool_stats(&self) -> PoolStats {
        let (size, idle, max) = match self {
            Database::Postgres(p) => (p.size(), p.num_idle(), p.options().get_max_connections()),
            Database::Sqlite(p) => (p.size(), p.num_idle(), p.options().get_max_connections()),
        };
        PoolStats {
            open: size,
            idle: u32::try_from(idle).unwrap_or(u32::MAX),
            max,
        }
    }

    /// Opens every connection the pool may hold, concurrently, and returns them to it.
    async fn fill_pool(&self) -> Filled {
        async fn fill<DB: sqlx::Database>(pool: &sqlx::Pool<DB>) -> Filled {
            let wanted = pool.options().get_max_connections();
            let tries = futures_util::future::join_all((0..wanted).map(|_| pool.acquire())).await;
            let (mut held, mut error) = (Vec::new(), None);
            for t in tries {
                match t {
                    Ok(conn) => held.push(conn),
                    Err(e) => error = Some(e),
                }
            }
            let open = u32::try_from(held.len()).unwrap_or(u32::MAX);
            drop(held);
            Filled { open, error }
        }
        match self {
            Database::Postgres(pool) => fill(pool).await,
            Database::Sqlite(pool) => fill(pool).await,
        }
    }

    /// A short name of the backend, for logs and metrics.
    pub fn backend_name(&self) -> &'static str {
        match self {
            Database::Postgres(_) => "postgres",
            Database::Sqlite(_) => "sqlite",
        }
    }

    /// Closes every connection.
    pub async fn close(&self) {
        match self {
            Database::Postgres(pool) => pool.close().await,
            Database::Sqlite(pool) => pool.close().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_url_hides_every_password() {
        let cases = [
            (
                "postgres://u@h/db?password=secret",
                "postgres://u@h/db?password=[REDACTED]",
            ),
            (
                "postgres://u@h/db?sslmode=require&sslpassword=secret",
                "postgres://u@h/db?sslmode=require&sslpassword=[REDACTED]",
            ),
            (
                "postgresql://u:secret@h:5432/db?application_name=x",
                "postgresql://u:[REDACTED]@h:5432/db?application_name=x",
            ),
            (
                "postgres://u:secret@h/db?Password=secret2",
                "postgres://u:[REDACTED]@h/db?Password=[REDACTED]",
            ),
            ("sqlite://outboxd.db", "sqlite://outboxd.db"),
        ];
        for (url, expected) in cases {
            let redacted = redact_url(url);
            assert_eq!(redacted, expected, "{url}");
            assert!(!redacted.contains("secret"), "{redacted}");
        }
    }

    #[test]
    fn sslpassword_never_reaches_the_driver() {
        assert_eq!(
            without_unsupported_secrets("postgres://u@h/db?sslmode=require&SSLPassword=x&a=1"),
            "postgres://u@h/db?sslmode=require&a=1"
        );
        assert_eq!(
            without_unsupported_secrets("postgres://u@h/db?sslpassword=x"),
            "postgres://u@h/db"
        );
        assert_eq!(
            without_unsupported_secrets("postgres://u@h/db?password=x"),
            "postgres://u@h/db?password=x"
        );
    }

    #[tokio::test]
    async fn only_create_mode_creates_and_read_only_cannot_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("outbox.db");
        let url = format!("sqlite://{}", path.display());
        for mode in [OpenMode::Existing, OpenMode::ReadOnly] {
            let error = connect_with_mode(&url, 1, mode).await.unwrap_err();
            assert!(
                matches!(&error, ConnectError::Missing { path: p } if *p == path),
                "{error}"
            );
            assert!(!path.exists(), "{mode:?} created the file");
        }
        let Database::Sqlite(pool) = connect(&url, 1).await.unwrap() else {
            panic!("sqlite")
        };
        sqlx::query("CREATE TABLE t (x INTEGER)")
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
        let Database::Sqlite(pool) = connect_with_mode(&url, 1, OpenMode::ReadOnly)
            .await
            .unwrap()
        else {
            panic!("sqlite")
        };
        let count: i64 = sqlx::query_scalar("SELECT count(*) FROM t")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(count, 0);
        let refused = sqlx::query("INSERT INTO t VALUES (1)").execute(&pool).await;
        assert!(refused.is_err(), "a read-only pool wrote");
        pool.close().await;
        let Database::Sqlite(pool) = connect_with_mode(&url, 1, OpenMode::Existing)
            .await
            .unwrap()
        else {
            panic!("sqlite")
        };
        sqlx::query("INSERT INTO t VALUES (1)")
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
    }

    /// The files SQLite keeps beside `path` while a WAL database is open.
    fn wal_files(path: &Path) -> Vec<PathBuf> {
        ["-wal", "-shm"]
            .iter()
            .map(|suffix| PathBuf::from(format!("{}{suffix}", path.display())))
            .filter(|p| p.exists())
            .collect()
    }

    #[tokio::test]
    async fn a_read_only_open_of_a_stopped_database_leaves_no_files_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("outbox.db");
        let url = format!("sqlite://{}", path.display());
        let Database::Sqlite(pool) = connect(&url, 1).await.unwrap() else {
            panic!("sqlite")
        };
        sqlx::query("CREATE TABLE t (x INTEGER)")
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
        assert_eq!(wal_files(&path), Vec::<PathBuf>::new(), "closed cleanly");
        let Database::Sqlite(pool) = connect_with_mode(&url, 2, OpenMode::ReadOnly)
            .await
            .unwrap()
        else {
            panic!("sqlite")
        };
        let count: i64 = sqlx::query_scalar("SELECT count(*) FROM t")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(count, 0);
        pool.close().await;
        assert_eq!(
            wal_files(&path),
            Vec::<PathBuf>::new(),
            "a read-only command left files beside a stopped database"
        );
    }

    #[tokio::test]
    async fn connection_errors_hide_query_passwords() {
        // A listener that hangs up at once: the driver fails without retrying (a refused
        // connection would be retried until the acquire timeout).
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                drop(socket);
            }
        });
        let url = format!("postgres://u@127.0.0.1:{port}/db?password=hunter2secret");
        let url = url.as_str();
        let error = connect(url, 2).await.unwrap_err();
        let shown = format!("{error} / {error:?}");
        assert!(!shown.contains("hunter2secret"), "{shown}");
        assert!(shown.contains("[REDACTED]"), "{shown}");
    }
}
