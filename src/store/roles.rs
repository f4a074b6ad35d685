//! The store's roles, one trait per kind of caller, so each holds only what it uses:
//!
//! | trait | who holds it |
//! |---|---|
//! | [`ClaimStore`] | the dispatcher (`src/dispatch`, wired by `src/daemon`): claims, takeovers, outcomes, releases, wake-up times, its published provider states |
//! | [`ReadStore`] | everything that shows the outbox: status, metrics, the API, the CLI, the checker |
//! | [`ConsoleStore`] | the review console's own reads: dashboard counts, search, the audit search |
//! | [`ReviewStore`] | people and probes changing the outbox: resolutions, cancels, redispatches, probe findings, audit entries |
//! | [`RetentionStore`] | the retention job |
//! | [`OperatorStore`] | the admin API, the console, the CLI and the probe job: read, console, review |
//! | [`OutboxStore`] | every role, for tools and tests ([`crate::store::Database::store`]) |
//!
//! Each backend implements [`ClaimStore`], [`ReadStore`], [`ConsoleStore`] and
//! [`RetentionStore`] directly where their statements live (`claims.rs`, `reads.rs`,
//! `console.rs`, `retention.rs`). [`ReviewStore`] is implemented once, for every backend,
//! in [`super::changes`], from the statements each backend binds.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{
    AttemptEnd, AttemptRow, AuditEntry, AuditFilter, Cancellation, ClaimRequest, ClaimedIntent,
    ConsoleCounts, FairShare, GaugeRead, IntentFilter, IntentRow, IntentSearch, NewAuditEntry,
    OutcomeRecord, ProviderStateRow, PrunedTable, Reclaim, ReconciliationFilter,
    ReconciliationItem, RecordResult, Redispatch, Release, Resolution, ReviewError, StatusSummary,
    StoreError, TenantScope, Tombstone,
};
use super::{AuditEntryId, ReconciliationItemId};
use crate::intent::{IntentId, IntentState, OperationId, TenantId};

/// The dispatcher's statements: its hot path and what its loop asks between claims.
#[async_trait]
pub trait ClaimStore: Send + Sync + 'static {
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

    /// [`ClaimStore::claim_due_shared`] with no tenant capped, starting with the first
    /// tenant (tools and tests; the dispatcher rotates with
    /// [`crate::dispatch::fairness::TenantTurns`]).
    async fn claim_due(&self, req: &ClaimRequest) -> Result<Vec<ClaimedIntent>, StoreError> {
        self.claim_due_shared(req, &FairShare::uncapped(req.limit))
            .await
    }

    /// Takes over in-flight intents whose lease expired: their open attempt is closed as
    /// `ambiguous`, the fencing token bumped, and the caller must decide and record the
    /// outcome with [`ClaimStore::record_outcomes`] (attempt `None`).
    async fn reclaim_expired(&self, req: &ClaimRequest) -> Result<Vec<ClaimedIntent>, StoreError>;

    /// Records outcomes in one transaction; each only if its fencing token still matches.
    /// A batch names each intent at most once (each entry writes one attempt row). What
    /// each outcome writes is decided in [`super::outcomes`].
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

    /// For each of `ids` that exists: its fencing token now, and whether it is in flight
    /// (what tells an outcome written by an earlier try of the same write, which kept its
    /// token and ended the flight, from one fenced off by a takeover, which bumped it).
    async fn fencing_now(&self, ids: &[IntentId])
        -> Result<Vec<(IntentId, i64, bool)>, StoreError>;

    /// Actions of pending intents that are not in `configured`, with counts.
    async fn pending_unconfigured_actions(
        &self,
        configured: &[String],
    ) -> Result<Vec<(String, i64)>, StoreError>;

    /// The earliest `next_attempt_at` of a pending intent of a configured action.
    async fn next_due_at(&self, actions: &[String]) -> Result<Option<DateTime<Utc>>, StoreError>;

    /// Replaces `owner`'s published provider states with `states` and deletes every row
    /// (any owner's) not updated since `forget_before`, in one transaction. On error
    /// nothing changes (the previous rows stay, showing their age).
    async fn publish_provider_states(
        &self,
        owner: &str,
        states: &[ProviderStateRow],
        forget_before: DateTime<Utc>,
    ) -> Result<(), StoreError>;

    /// Deletes `owner`'s published provider states (a daemon stopping).
    async fn withdraw_provider_states(&self, owner: &str) -> Result<(), StoreError>;
}

/// What shows the outbox: status, intents, attempts, reconciliation items, the audit log,
/// tombstones, provider states and the live gauges.
#[async_trait]
pub trait ReadStore: Send + Sync + 'static {
    /// `"postgres"` or `"sqlite"`.
    fn backend(&self) -> &'static str;

    /// Counts by state, the oldest due intent and the reconciliation backlog. Counts every
    /// row (for `outboxd status`); metrics use [`ReadStore::live_gauges`].
    async fn status_summary(&self, now: DateTime<Utc>) -> Result<StatusSummary, StoreError>;

    /// Every published provider state, by provider then owner.
    async fn list_provider_states(&self) -> Result<Vec<ProviderStateRow>, StoreError>;

    /// The live backlog per action, read through partial indexes only (cost follows the
    /// backlog, not the finished history), or [`GaugeRead::OtherReplica`] when another
    /// replica computes the gauges (PostgreSQL; see [`super::postgres`]'s gauge lock).
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

    /// The tombstone of a pruned operation.
    async fn find_tombstone(
        &self,
        tenant: &TenantId,
        operation_id: &OperationId,
    ) -> Result<Option<Tombstone>, StoreError>;
}

/// The review console's own reads (`/review`).
#[async_trait]
pub trait ConsoleStore: Send + Sync + 'static {
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
}

/// People and probes changing the outbox. Each change and its audit entry commit together.
/// Implemented once for every backend ([`super::changes`]).
#[async_trait]
pub trait ReviewStore: Send + Sync + 'static {
    /// Resolves an open item and moves its intent accordingly, with an audit entry, in one
    /// transaction. Of two concurrent resolutions exactly one applies; the other gets
    /// [`ReviewError::AlreadyResolved`].
    async fn resolve_reconciliation(
        &self,
        resolution: &Resolution,
    ) -> Result<ReconciliationItem, ReviewError>;

    /// Cancels a pending intent (terminal `cancelled`), with an audit entry.
    async fn cancel_intent(&self, cancellation: &Cancellation) -> Result<IntentRow, ReviewError>;

    /// Redispatches a `failed` intent (same key, new retry budget), with an audit entry, in
    /// one transaction. Anything but `failed` gets [`ReviewError::WrongState`].
    async fn redispatch_failed(&self, redispatch: &Redispatch) -> Result<IntentRow, ReviewError>;

    /// Records what an automatic probe found on an open item.
    async fn record_probe_finding(
        &self,
        item_id: ReconciliationItemId,
        finding: &str,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError>;

    /// Appends an audit entry.
    async fn append_audit(&self, entry: &NewAuditEntry) -> Result<AuditEntryId, StoreError>;
}

/// The retention job's statements.
#[async_trait]
pub trait RetentionStore: Send + Sync + 'static {
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

    /// Makes the space rows deleted from `tables` took reusable now, outside any
    /// transaction (PostgreSQL: `VACUUM (ANALYZE)` on the tables this role may vacuum;
    /// SQLite: nothing, freed pages are reused). Fails only if the database does.
    async fn reclaim(&self, tables: &[PrunedTable]) -> Result<Reclaim, StoreError>;
}

/// What a person's tools use (the admin API, the review console, the CLI, the probe job):
/// reads, the console's reads and the review changes.
pub trait OperatorStore: ReadStore + ConsoleStore + ReviewStore {}

impl<S: ReadStore + ConsoleStore + ReviewStore> OperatorStore for S {}

/// Every role, for tools and tests.
pub trait OutboxStore: ClaimStore + OperatorStore + RetentionStore {}

impl<S: ClaimStore + OperatorStore + RetentionStore> OutboxStore for S {}
