//! The SQLite store: claims under `BEGIN IMMEDIATE` (one writer at a time) committed before
//! any network call, batched fenced outcome writes, and the read models. Each role trait
//! is implemented where its statements live: [`crate::store::ClaimStore`] in `claims.rs`
//! (statement texts in `claim_sql.rs`), [`crate::store::ReadStore`] in `reads.rs`,
//! [`crate::store::ConsoleStore`] in `console.rs`, [`crate::store::RetentionStore`] in
//! `retention.rs`, and the statements of a review change in `review.rs`. Rows become
//! values in `rows.rs`.

mod claim_sql;
mod claims;
mod console;
mod reads;
mod retention;
mod review;
mod rows;

pub use review::append_audit_on;

use chrono::{DateTime, Utc};
use sqlx::SqlitePool;

use super::TenantScope;

/// The SQLite store: every role of [`crate::store::OutboxStore`].
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    /// Wraps a pool whose database is migrated.
    pub fn new(pool: SqlitePool) -> Self {
        Self { pool }
    }

    /// The underlying pool.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

/// Milliseconds since the Unix epoch, the SQLite time representation.
pub(crate) fn ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis()
}

/// The instant `millis` after the epoch.
pub(crate) fn from_ms(millis: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(millis).unwrap_or_default()
}

/// A list as the JSON array `json_each` reads (SQLite's stand-in for PostgreSQL's arrays).
fn json_list(values: &[String]) -> String {
    serde_json::to_string(values).unwrap_or_else(|_| "[]".into())
}

/// `?N IS NULL OR tenant IN (SELECT value FROM json_each(?N))` takes the scope as a JSON
/// array (NULL = all tenants).
fn scope_json(scope: &TenantScope) -> Option<String> {
    scope.as_list().as_deref().map(json_list)
}
