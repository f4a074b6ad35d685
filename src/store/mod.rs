//! The outbox store: schema migrations and every SQL statement the daemon issues, one
//! module per backend ([`postgres`], [`sqlite`]) behind the [`OutboxStore`] trait.
//!
//! Producers do not use this module; they use [`crate::enqueue`] on their own transaction.
//! Every write that completes an attempt is fenced by the claim's token, so a dispatcher
//! that lost its lease cannot overwrite what the new owner recorded.

pub mod compat;
pub mod connect;
pub mod console;
pub mod enqueue;
pub mod gauges;
pub mod ids;
pub mod jobs;
pub mod migrate;
pub mod postgres;
pub mod review;
pub mod sqlite;
pub mod types;

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

pub use connect::{connect, connect_dispatcher, Database, DatabaseUrl, PoolStats};
pub use console::*;
pub use enqueue::CommittedEnqueueError;
pub use gauges::*;
pub use ids::{AuditEntryId, ReconciliationItemId};
pub use review::*;
pub use types::*;

use crate::intent::{IntentId, IntentState, OperationId, TenantId};

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
    /// ends), and commits before returning: no lock is held after. Tenants share the claim
    /// as `share` says ([`FairShare`]); the result is in claim order (`next_attempt_at`,
    /// `id`).
    async fn claim_due_shared(
        &self,
        req: &ClaimRequest,
        share: &FairShare,
    ) -> Result<Vec<ClaimedIntent>, StoreError>;

    /// [`OutboxStore::claim_due_shared`] with no tenant capped, starting with the first
    /// tenant (tools and tests; the dispatcher rotates with
    /// [`crate::dispatch::fairness::TenantTurns`]).
    async fn claim_due(&self, req: &ClaimRequest) -> Result<Vec<ClaimedIntent>, StoreError> {
        self.claim_due_shared(req, &FairShare::uncapped(req.limit))
            .await
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

    /// Replaces `owner`'s published provider states with `states` and deletes every row
    /// (any owner's) not updated since `forget_before`, in one transaction.
    async fn publish_provider_states(
        &self,
        owner: &str,
        states: &[ProviderStateRow],
        forget_before: DateTime<Utc>,
    ) -> Result<(), StoreError>;

    /// Deletes `owner`'s published provider states (a daemon stopping).
    async fn withdraw_provider_states(&self, owner: &str) -> Result<(), StoreError>;

    /// Every published provider state, by provider then owner.
    async fn list_provider_states(&self) -> Result<Vec<ProviderStateRow>, StoreError>;

    /// The live backlog per action, read through partial indexes only (cost follows the
    /// backlog, not the finished history), or [`GaugeRead::OtherReplica`] when another
    /// replica computes the gauges (PostgreSQL; see [`postgres`]'s gauge lock).
    async fn live_gauges(&self, now: DateTime<Utc>) -> Result<GaugeRead, StoreError>;

    /// One intent by id.
    async fn get_intent(&self, id: IntentId) -> Result<Option<IntentRow>, StoreError>;

    /// One intent by its operation identity.
    async fn find_intent(
        &self,
        tenant: &TenantId,
        operation_id: &OperationId,
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
        id: ReconciliationItemId,
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
        item_id: ReconciliationItemId,
        finding: &str,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError>;

    /// Appends an audit entry.
    async fn append_audit(&self, entry: &NewAuditEntry) -> Result<AuditEntryId, StoreError>;

    /// Audit entries in `scope` (entries without a tenant only for [`TenantScope::All`]),
    /// newest first.
    async fn list_audit(
        &self,
        scope: &TenantScope,
        before_id: Option<AuditEntryId>,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        self.search_audit(&AuditFilter::all(scope.clone(), before_id, limit))
            .await
    }

    /// Audit entries matching `filter`, newest first.
    async fn search_audit(&self, filter: &AuditFilter) -> Result<Vec<AuditEntry>, StoreError>;

    /// The console dashboard's counts for `scope`.
    async fn console_counts(
        &self,
        scope: &TenantScope,
        now: DateTime<Utc>,
    ) -> Result<ConsoleCounts, StoreError>;

    /// Attempts of `scope` that ended at or after `since`, looking at no more than the
    /// latest `scan_limit` attempt rows (by id, so the read is bounded on a large table).
    async fn recent_attempt_ends(
        &self,
        scope: &TenantScope,
        since: DateTime<Utc>,
        scan_limit: u32,
    ) -> Result<Vec<AttemptEnd>, StoreError>;

    /// Intents matching `search`, newest first.
    async fn search_intents(&self, search: &IntentSearch) -> Result<Vec<IntentRow>, StoreError>;

    /// The earliest unfinished (`pending`, `in_flight` or `unknown`) intent enqueued before
    /// `intent` with the same tenant and ordering key: the one it waits for.
    async fn ordering_blocker(
        &self,
        intent: &IntentRow,
    ) -> Result<Option<(IntentId, IntentState)>, StoreError>;

    /// Redispatches a `failed` intent (same key, new retry budget), with an audit entry, in
    /// one transaction. Anything but `failed` gets [`ReviewError::WrongState`].
    async fn redispatch_failed(&self, redispatch: &Redispatch) -> Result<IntentRow, ReviewError>;

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
        tenant: &TenantId,
        operation_id: &OperationId,
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
