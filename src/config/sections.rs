//! The daemon-wide sections of the configuration: `[database]`, `[dispatcher]`,
//! `[retention]`, `[probes]` and `[logging]`, with their built-in defaults.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::secret::{redact_url_password, serialize_redacted_url};

/// `[database]`: where the outbox lives.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseConfig {
    /// `sqlite://PATH` (embedded default) or `postgres://USER@HOST/DB`. After loading, a
    /// password from `password_env`/`password_file` has been injected into it, so pass it
    /// to the store as is; `Debug` and serialization redact the password.
    #[serde(serialize_with = "serialize_redacted_url")]
    pub url: String,
    /// Environment variable holding the database password (PostgreSQL only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password_env: Option<String>,
    /// File holding the database password, trailing newline ignored (PostgreSQL only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password_file: Option<PathBuf>,
    /// Size of the connection pool (at least 1).
    pub max_connections: u32,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        Self {
            url: "sqlite://outboxd.db".to_owned(),
            password_env: None,
            password_file: None,
            max_connections: 8,
        }
    }
}

impl DatabaseConfig {
    /// Whether the URL names PostgreSQL (`postgres://` or `postgresql://`).
    pub fn is_postgres(&self) -> bool {
        self.url.starts_with("postgres://") || self.url.starts_with("postgresql://")
    }
}

impl fmt::Debug for DatabaseConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DatabaseConfig")
            .field("url", &redact_url_password(&self.url))
            .field("password_env", &self.password_env)
            .field("password_file", &self.password_file)
            .field("max_connections", &self.max_connections)
            .finish()
    }
}

/// `[dispatcher]`: claiming and delivering intents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DispatcherConfig {
    /// Lease owner name written on claimed rows; empty means `<hostname>-<pid>` (see
    /// [`super::Config::dispatcher_owner`]). Must be unique per running dispatcher.
    pub owner: String,
    /// Intents claimed per round trip (1 ..= 10000).
    pub batch_size: u32,
    /// Deliveries in flight at once (1 ..= 10000).
    pub concurrency: u32,
    /// How long a claim stays valid, by the database's clock; an attempt still running past
    /// it is treated as ambiguous. At least one second, and at least every provider's
    /// `request_timeout` plus [`crate::config::SEND_MARGIN`].
    #[serde(with = "super::duration")]
    pub lease: Duration,
    /// Polling interval when no notification arrives (the fallback for `LISTEN/NOTIFY`).
    #[serde(with = "super::duration")]
    pub poll_interval: Duration,
    /// On shutdown, how long in-flight deliveries may finish; should be shorter than `lease`.
    #[serde(with = "super::duration")]
    pub shutdown_grace: Duration,
    /// How often expired leases are released (their attempts recorded as ambiguous).
    #[serde(with = "super::duration")]
    pub release_expired_every: Duration,
}

impl Default for DispatcherConfig {
    fn default() -> Self {
        Self {
            owner: String::new(),
            batch_size: 200,
            concurrency: 256,
            lease: Duration::from_secs(30),
            poll_interval: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(20),
            release_expired_every: Duration::from_secs(5),
        }
    }
}

/// `[retention]`: pruning finished intents while keeping tombstones much longer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionConfig {
    /// Finished intents (delivered, failed, cancelled, resolved) are pruned after this.
    #[serde(with = "super::duration")]
    pub finished_after: Duration,
    /// The `(tenant, operation_id)` tombstone of a pruned intent is kept this long; a late
    /// enqueue that hits it is answered from it. Not shorter than `finished_after`.
    #[serde(with = "super::duration")]
    pub tombstone_after: Duration,
    /// When the pruning job runs: cron with seconds (6 fields, tokio-cron-scheduler syntax).
    pub schedule: String,
    /// Rows (intents, or tombstones) deleted per batch; each batch is one short transaction.
    pub batch_size: u32,
    /// Pause between two full batches, leaving the database to the dispatcher and
    /// autovacuum; never shorter than twice the batch took (so a pass is busy at most a
    /// third of its time), and no pause at all when zero.
    #[serde(with = "super::duration")]
    pub batch_pause: Duration,
    /// After a pass that deleted rows, `VACUUM (ANALYZE)` the tables it deleted from
    /// (PostgreSQL; SQLite reuses freed pages by itself), so the next window's rows reuse
    /// the pruned space instead of growing the table. Costs one vacuum of those tables per
    /// pass that pruned: I/O over their pages changed since the last vacuum, and a scan of
    /// their indexes when many rows died.
    pub vacuum: bool,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            finished_after: Duration::from_secs(7 * 86_400),
            tombstone_after: Duration::from_secs(400 * 86_400),
            schedule: "0 */10 * * * *".to_owned(),
            batch_size: 1000,
            batch_pause: Duration::from_millis(50),
            vacuum: true,
        }
    }
}

/// `[probes]`: automatic status lookups for intents in reconciliation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProbesConfig {
    /// When probes run: cron with seconds (6 fields).
    pub schedule: String,
}

impl Default for ProbesConfig {
    fn default() -> Self {
        Self {
            schedule: "*/30 * * * * *".to_owned(),
        }
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Pretty on a terminal, JSON otherwise.
    #[default]
    Auto,
    /// Human-readable lines.
    Pretty,
    /// One JSON object per line.
    Json,
}

/// `[logging]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoggingConfig {
    /// `auto`, `pretty` or `json`.
    pub format: LogFormat,
    /// A `tracing_subscriber::EnvFilter` directive, e.g. `info,outboxd=debug`.
    pub level: String,
}

impl Default for LoggingConfig {
    fn default() -> Self {
        Self {
            format: LogFormat::Auto,
            level: "info".to_owned(),
        }
    }
}
