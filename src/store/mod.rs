//! The outbox store: schema migrations and every SQL statement the daemon issues, one
//! module per backend ([`postgres`], [`sqlite`]) behind the [`OutboxStore`] trait.
//!
//! Producers do not use this module; they use [`crate::enqueue`] on their own transaction.
//! Every write that completes an attempt is fenced by the claim's token, so a dispatcher
//! that lost its lease cannot overwrite what the new owner recorded.

pub mod compat;
pub mod connect;
pub mod gauges;
pub mod migrate;
pub mod postgres;
pub mod review;
pub mod sqlite;
pub mod types;

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

pub use connect::{connect, connect_dispatcher, Database, DatabaseUrl, PoolStats};
pub use gauges::*;
pub use review::*;
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

/// Filter for [`OutboxStore::list_intents`].
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

/// Every statement the dispatcher and the operator tools issue, for one backend.
#[async_trait]
pub trait OutboxStore: Send + Sync + 'static {
    /// `"postgres"` or `"sqlite"`.
    fn backend(&self) -> &'static str;

    /// Claims due pending intents (respecting ordering keys), bumps their fencing tokens,
    /// marks an attempt open on each (`attempt_started_at`; its row is written when it
    /// ends), and commits before returning: no lock is held after.
    async fn claim_due(&self, req: &ClaimRequest) -> Result<Vec<ClaimedIntent>, StoreError>;

    /// Like [`OutboxStore::claim_due`], but only intents after `after` in claim order
    /// (`next_attempt_at`, `id`). The dispatcher passes the last position it claimed so a
    /// busy claim does not rescan the entries its earlier claims left behind (on
    /// PostgreSQL, dead index entries until vacuum); it scans from the start whenever a
    /// batch comes back short, and at least every second. Backends without that cost may
    /// ignore `after`.
    async fn claim_due_after(
        &self,
        req: &ClaimRequest,
        after: Option<(DateTime<Utc>, IntentId)>,
    ) -> Result<Vec<ClaimedIntent>, StoreError> {
        let _ = after;
        self.claim_due(req).await
    }

    /// Takes over in-flight intents whose lease expired: their open attempt is closed as
    /// `ambiguous`, the fencing token bumped, and the caller must decide and record the
    /// outcome with [`OutboxStore::record_outcomes`] (attempt `None`).
    async fn reclaim_expired(&self, req: &ClaimRequest) -> Result<Vec<ClaimedIntent>, StoreError>;

    /// Records outcomes in one transaction; each only if its fencing token still matches.
    /// A batch names each intent at most once (each entry writes one attempt row).
    async fn record_outcomes(
        &self,
        outcomes: &[OutcomeRecord],
    ) -> Result<Vec<RecordResult>, StoreError>;

    /// Hands claims back unsent: state `pending`, the opened attempt written as `not_sent`;
    /// only while the fencing token still matches. A batch names each intent at most once.
    async fn release_claims(
        &self,
        releases: &[Release],
        now: DateTime<Utc>,
    ) -> Result<(), StoreError>;

    /// Actions of pending intents that are not in `configured`, with counts.
    async fn pending_unconfigured_actions(
        &self,
        configured: &[String],
    ) -> Result<Vec<(String, i64)>, StoreError>;

    /// The earliest `next_attempt_at` of a pending intent of a configured action.
    async fn next_due_at(&self, actions: &[String]) -> Result<Option<DateTime<Utc>>, StoreError>;

    /// Counts by state, the oldest due intent and the reconciliation backlog. Counts every
    /// row (for `outboxd status`); metrics use [`OutboxStore::live_gauges`].
    async fn status_summary(&self, now: DateTime<Utc>) -> Result<StatusSummary, StoreError>;

    /// The live backlog per action, read through partial indexes only (cost follows the
    /// backlog, not the finished history), or [`GaugeRead::OtherReplica`] when another
    /// replica computes the gauges (PostgreSQL; see [`postgres`]'s gauge lock).
    async fn live_gauges(&self, now: DateTime<Utc>) -> Result<GaugeRead, StoreError>;

    /// One intent by id.
    async fn get_intent(&self, id: IntentId) -> Result<Option<IntentRow>, StoreError>;

    /// One intent by its operation identity.
    async fn find_intent(
        &self,
        tenant: &str,
        operation_id: &str,
    ) -> Result<Option<IntentRow>, StoreError>;

    /// Intents matching `filter`, by id.
    async fn list_intents(&self, filter: &IntentFilter) -> Result<Vec<IntentRow>, StoreError>;

    /// Every attempt of an intent, oldest first.
    async fn list_attempts(&self, intent_id: IntentId) -> Result<Vec<AttemptRow>, StoreError>;

    /// Ids of intents with an open reconciliation item.
    async fn open_reconciliation_intents(&self) -> Result<Vec<IntentId>, StoreError>;

    /// Reconciliation items matching `filter`, oldest first.
    async fn list_reconciliation(
        &self,
        filter: &ReconciliationFilter,
    ) -> Result<Vec<ReconciliationItem>, StoreError>;

    /// One reconciliation item, if inside `scope`.
    async fn get_reconciliation(
        &self,
        id: i64,
        scope: &TenantScope,
    ) -> Result<Option<ReconciliationItem>, StoreError>;

    /// Reconciliation items of one intent, oldest first.
    async fn reconciliation_for_intent(
        &self,
        intent_id: IntentId,
    ) -> Result<Vec<ReconciliationItem>, StoreError>;

    /// Resolves an open item and moves its intent accordingly, with an audit entry, in one
    /// transaction. Of two concurrent resolutions exactly one applies; the other gets
    /// [`ReviewError::AlreadyResolved`].
    async fn resolve_reconciliation(
        &self,
        resolution: &Resolution,
    ) -> Result<ReconciliationItem, ReviewError>;

    /// Cancels a pending intent (terminal `cancelled`), with an audit entry.
    async fn cancel_intent(&self, cancellation: &Cancellation) -> Result<IntentRow, ReviewError>;

    /// Records what an automatic probe found on an open item.
    async fn record_probe_finding(
        &self,
        item_id: i64,
        finding: &str,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError>;

    /// Appends an audit entry.
    async fn append_audit(&self, entry: &NewAuditEntry) -> Result<i64, StoreError>;

    /// Audit entries in `scope` (entries without a tenant only for [`TenantScope::All`]),
    /// newest first.
    async fn list_audit(
        &self,
        scope: &TenantScope,
        before_id: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, StoreError>;

    /// Prunes up to `limit` intents finished before `finished_before`, leaving a tombstone
    /// for each; returns how many were pruned.
    async fn prune_finished(
        &self,
        finished_before: DateTime<Utc>,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<u64, StoreError>;

    /// Deletes up to `limit` tombstones of intents finished before `finished_before`, oldest
    /// pruned first, in one short transaction; returns how many were deleted.
    async fn prune_tombstones(
        &self,
        finished_before: DateTime<Utc>,
        limit: u32,
    ) -> Result<u64, StoreError>;

    /// The tombstone of a pruned operation.
    async fn find_tombstone(
        &self,
        tenant: &str,
        operation_id: &str,
    ) -> Result<Option<Tombstone>, StoreError>;
}

impl Database {
    /// The store for this database.
    pub fn store(&self) -> Arc<dyn OutboxStore> {
        match self {
            Database::Postgres(pool) => Arc::new(postgres::PgStore::new(pool.clone())),
            Database::Sqlite(pool) => Arc::new(sqlite::SqliteStore::new(pool.clone())),
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
