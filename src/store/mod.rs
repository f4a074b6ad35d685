//! The outbox store: schema migrations and every SQL statement the daemon issues, one
//! module per backend ([`postgres`], [`sqlite`]) behind role traits ([`roles`]: the
//! dispatcher holds a [`ClaimStore`], a person's tools an [`OperatorStore`], the retention
//! job a [`RetentionStore`]). The rules a statement serves are decided here, once: what an
//! outcome writes ([`outcomes`]), how a review change runs ([`changes`]), the folds of the
//! read models ([`types`], [`console`], [`gauges`]); the backends bind and execute.
//!
//! Producers do not use this module; they use [`crate::enqueue`] on their own transaction.
//! Every write that completes an attempt is fenced by the claim's token, so a dispatcher
//! that lost its lease cannot overwrite what the new owner recorded.

pub(crate) mod changes;
pub mod compat;
pub mod connect;
pub mod console;
pub mod enqueue;
pub mod gauges;
pub mod ids;
pub mod jobs;
pub mod migrate;
pub(crate) mod outcomes;
pub mod payload;
pub mod postgres;
pub mod reclaim;
pub mod review;
pub mod roles;
pub mod schema;
pub mod sqlite;
pub mod types;

use std::sync::Arc;

use chrono::{DateTime, Utc};

pub use connect::{connect, connect_dispatcher, Database, DatabaseUrl, PoolStats};
pub use console::*;
pub use enqueue::CommittedEnqueueError;
pub use gauges::*;
pub use ids::{AuditEntryId, ReconciliationItemId};
pub use payload::{PayloadBody, StoredPayload};
pub use reclaim::{PrunedTable, Reclaim};
pub use review::*;
pub use roles::*;
pub use types::*;

use crate::intent::IntentId;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database failed (unreachable, timeout, constraint). Usually transient.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// A stored value could not be understood (a state or class name this build lacks).
    #[error("unexpected stored value: {0}")]
    Corrupt(String),
}

impl StoreError {
    /// The error of a statement abandoned after `wait` without an answer (`what`: "the
    /// claim", "the outcome write").
    pub fn unanswered(what: &str, wait: std::time::Duration) -> Self {
        StoreError::Database(sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("{what} did not answer within {wait:?}"),
        )))
    }
}

/// Filter for [`ReadStore::list_intents`].
#[derive(Debug, Clone, Default)]
pub struct IntentFilter {
    /// Only these tenants (None: all).
    pub tenants: Option<Vec<String>>,
    /// Only this state.
    pub state: Option<crate::intent::IntentState>,
    /// Only this action.
    pub action: Option<String>,
    /// Only intents created before this instant.
    pub created_before: Option<DateTime<Utc>>,
    /// Only ids greater than this (pagination).
    pub after_id: Option<IntentId>,
    /// At most this many rows.
    pub limit: u32,
}

impl Database {
    /// Every role of the store, for tools and tests.
    pub fn store(&self) -> Arc<dyn OutboxStore> {
        self.store_as(|s| Arc::new(s), |s| Arc::new(s))
    }

    /// The dispatcher's role. On PostgreSQL its claims and outcome groups run on sessions
    /// of their own ([`postgres::DispatcherSessions`], opened when first used).
    pub fn claim_store(&self) -> Arc<dyn ClaimStore> {
        match self {
            Database::Postgres(pool) => Arc::new(postgres::PgStore::for_dispatcher(
                pool.clone(),
                Arc::new(postgres::DispatcherSessions::beside(pool)),
            )),
            Database::Sqlite(pool) => Arc::new(sqlite::SqliteStore::new(pool.clone())),
        }
    }

    /// What shows the outbox (the metrics scrape).
    pub fn read_store(&self) -> Arc<dyn ReadStore> {
        self.store_as(|s| Arc::new(s), |s| Arc::new(s))
    }

    /// The retention job's role.
    pub fn retention_store(&self) -> Arc<dyn RetentionStore> {
        self.store_as(|s| Arc::new(s), |s| Arc::new(s))
    }

    /// What a person's tools use: reads, the console's reads and the review changes.
    pub fn operator_store(&self) -> Arc<dyn OperatorStore> {
        self.store_as(|s| Arc::new(s), |s| Arc::new(s))
    }

    /// This database's store, as the role `R` (each call makes a store of its own).
    fn store_as<R: ?Sized>(
        &self,
        pg: fn(postgres::PgStore) -> Arc<R>,
        lite: fn(sqlite::SqliteStore) -> Arc<R>,
    ) -> Arc<R> {
        match self {
            Database::Postgres(pool) => pg(postgres::PgStore::new(pool.clone())),
            Database::Sqlite(pool) => lite(sqlite::SqliteStore::new(pool.clone())),
        }
    }
}

/// Parses a stored state name.
pub(crate) fn parse_state(value: &str) -> Result<crate::intent::IntentState, StoreError> {
    crate::intent::IntentState::parse(value)
        .ok_or_else(|| StoreError::Corrupt(format!("intent state {value:?}")))
}

/// Parses a stored attempt class name.
pub(crate) fn parse_class(
    value: Option<String>,
) -> Result<Option<crate::action::AttemptClass>, StoreError> {
    value
        .map(|v| {
            crate::action::AttemptClass::parse(&v)
                .ok_or_else(|| StoreError::Corrupt(format!("attempt class {v:?}")))
        })
        .transpose()
}

/// What lease expiry records on the abandoned attempt.
pub(crate) const LEASE_EXPIRED_ERROR: &str =
    "lease expired before the outcome was recorded (the dispatcher died or stalled); the request may have reached the provider";

/// Converts a lease length to whole milliseconds for SQL.
pub(crate) fn lease_millis(req: &ClaimRequest) -> i64 {
    i64::try_from(req.lease.as_millis()).unwrap_or(i64::MAX / 2)
}

/// Decodes rows as they arrive, so a listing holds each raw row only until it is decoded
/// (500 rows of large payloads would otherwise be held twice: raw and decoded).
pub(crate) async fn decode_each<R, T>(
    rows: impl futures_util::Stream<Item = Result<R, sqlx::Error>>,
    decode: impl Fn(&R) -> Result<T, StoreError>,
) -> Result<Vec<T>, StoreError> {
    use futures_util::TryStreamExt;
    let mut rows = std::pin::pin!(rows);
    let mut out = Vec::new();
    while let Some(row) = rows.try_next().await? {
        out.push(decode(&row)?);
    }
    Ok(out)
}
