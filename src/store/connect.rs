//! Opening the database named by a URL: `sqlite://path` (the embedded default) or
//! `postgres://...` (production, shared by many replicas).

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{PgPool, SqlitePool};

use super::migrate::{self, MigrateError, MigrateReport};

/// Which backend a database URL names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseUrl {
    /// `postgres://` or `postgresql://`.
    Postgres(String),
    /// `sqlite://path` or `sqlite::memory:`.
    Sqlite(String),
}

impl DatabaseUrl {
    /// Classifies `url` by its scheme.
    pub fn parse(url: &str) -> Result<Self, ConnectError> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Self::Postgres(url.to_owned()))
        } else if url.starts_with("sqlite:") {
            Ok(Self::Sqlite(url.to_owned()))
        } else {
            Err(ConnectError::UnsupportedScheme(redact_url(url)))
        }
    }
}

/// An open connection pool of either backend.
#[derive(Debug, Clone)]
pub enum Database {
    /// PostgreSQL.
    Postgres(PgPool),
    /// SQLite.
    Sqlite(SqlitePool),
}

/// Why the database could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The URL is neither `postgres://` nor `sqlite:`.
    #[error("database.url {0:?} is not supported: use sqlite://PATH or postgres://USER@HOST/DB")]
    UnsupportedScheme(String),
    /// The URL could not be parsed or the server could not be reached.
    #[error("cannot open database {url}: {source}")]
    Open {
        /// The URL with any password removed.
        url: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
}

/// Hides a password in a URL for error messages and logs.
pub fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("REDACTED"));
            parsed.to_string()
        }
        _ => url.to_owned(),
    }
}

/// Opens a pool of at most `max_connections`.
pub async fn connect(url: &str, max_connections: u32) -> Result<Database, ConnectError> {
    let open_err = |source| ConnectError::Open {
        url: redact_url(url),
        source,
    };
    match DatabaseUrl::parse(url)? {
        DatabaseUrl::Postgres(url) => {
            let options = PgConnectOptions::from_str(&url).map_err(open_err)?;
            let pool = PgPoolOptions::new()
                .max_connections(max_connections.max(2))
                .acquire_timeout(Duration::from_secs(10))
                .connect_with(options)
                .await
                .map_err(open_err)?;
            Ok(Database::Postgres(pool))
        }
        DatabaseUrl::Sqlite(url) => {
            let options = SqliteConnectOptions::from_str(&url)
                .map_err(open_err)?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Full)
                .foreign_keys(true)
                .busy_timeout(Duration::from_secs(10));
            let pool = SqlitePoolOptions::new()
                .max_connections(max_connections.max(1))
                .acquire_timeout(Duration::from_secs(10))
                .connect_with(options)
                .await
                .map_err(open_err)?;
            Ok(Database::Sqlite(pool))
        }
    }
}

impl Database {
    /// Applies pending migrations.
    pub async fn migrate(&self) -> Result<MigrateReport, MigrateError> {
        match self {
            Database::Postgres(pool) => migrate::migrate_postgres(pool).await,
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
