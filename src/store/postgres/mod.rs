//! The PostgreSQL store: `FOR UPDATE SKIP LOCKED` claims committed before any network
//! call, batched fenced outcome writes, and the read models. Statements live in
//! [`claims`] (the dispatcher's hot path) and [`reads`] (status and review).

mod claims;
mod console;
mod gauges;
mod providers;
mod reads;
mod retention;
mod review;

pub use review::append_audit_on;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::{
    AttemptEnd, AttemptRow, AuditEntry, AuditFilter, Cancellation, ClaimRequest, ClaimedIntent,
    ConsoleCounts, FairShare, IntentFilter, IntentRow, IntentSearch, NewAuditEntry, OutboxStore,
    OutcomeRecord, ProviderStateRow, ReconciliationFilter, ReconciliationItem, RecordResult,
    Redispatch, Release, Resolution, ReviewError, StatusSummary, StoreError, TenantScope,
    Tombstone,
};
use crate::intent::{IntentId, IntentState, OperationId, TenantId};
use crate::store::{AuditEntryId, ReconciliationItemId};

/// The PostgreSQL implementation of [`OutboxStore`].
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
    gauge_leader: std::sync::Arc<gauges::GaugeLeader>,
}

impl PgStore {
    /// Wraps a pool whose database is migrated.
    pub fn new(pool: PgPool) -> Self {
        Self {
            pool,
            gauge_leader: Default::default(),
        }
    }

    /// The underlying pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

#[async_trait]
impl OutboxStore for PgStore {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    async fn claim_due_shared(
        &self,
        req: &ClaimRequest,
        share: &FairShare,
    ) -> Result<Vec<ClaimedIntent>, StoreError> {
        claims::claim_due(&self.pool, req, share).await
    }

    async fn reclaim_expired(&self, req: &ClaimRequest) -> Result<Vec<ClaimedIntent>, StoreError> {
        claims::reclaim_expired(&self.pool, req).await
    }

    async fn record_outcomes(
        &self,
        outcomes: &[OutcomeRecord],
    ) -> Result<Vec<RecordResult>, StoreError> {
        claims::record_outcomes(&self.pool, outcomes).await
    }

    async fn release_claims(
        &self,
        releases: &[Release],
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        claims::release_claims(&self.pool, releases, now).await
    }

    async fn pending_unconfigured_actions(
        &self,
        configured: &[String],
    ) -> Result<Vec<(String, i64)>, StoreError> {
        reads::pending_unconfigured_actions(&self.pool, configured).await
    }

    async fn next_due_at(&self, actions: &[String]) -> Result<Option<DateTime<Utc>>, StoreError> {
        reads::next_due_at(&self.pool, actions).await
    }

    async fn status_summary(&self, now: DateTime<Utc>) -> Result<StatusSummary, StoreError> {
        reads::status_summary(&self.pool, now).await
    }

    async fn publish_provider_states(
        &self,
        owner: &str,
        states: &[ProviderStateRow],
        forget_before: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        providers::publish(&self.pool, owner, states, forget_before).await
    }

    async fn withdraw_provider_states(&self, owner: &str) -> Result<(), StoreError> {
        providers::withdraw(&self.pool, owner).await
    }

    async fn list_provider_states(&self) -> Result<Vec<ProviderStateRow>, StoreError> {
        providers::list(&self.pool).await
    }

    async fn live_gauges(&self, now: DateTime<Utc>) -> Result<super::GaugeRead, StoreError> {
        self.gauge_leader.read(&self.pool, now).await
    }

    async fn get_intent(&self, id: IntentId) -> Result<Option<IntentRow>, StoreError> {
        reads::get_intent(&self.pool, id).await
    }

    async fn find_intent(
        &self,
        tenant: &TenantId,
        operation_id: &OperationId,
    ) -> Result<Option<IntentRow>, StoreError> {
        reads::find_intent(&self.pool, tenant, operation_id).await
    }

    async fn list_intents(&self, filter: &IntentFilter) -> Result<Vec<IntentRow>, StoreError> {
        reads::list_intents(&self.pool, filter).await
    }

    async fn list_attempts(&self, intent_id: IntentId) -> Result<Vec<AttemptRow>, StoreError> {
        reads::list_attempts(&self.pool, intent_id).await
    }

    async fn open_reconciliation_intents(&self) -> Result<Vec<IntentId>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT intent_id FROM outbox_reconciliation_items WHERE resolved_at IS NULL ORDER BY intent_id",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    async fn list_reconciliation(
        &self,
        filter: &ReconciliationFilter,
    ) -> Result<Vec<ReconciliationItem>, StoreError> {
        review::list_reconciliation(&self.pool, filter).await
    }

    async fn get_reconciliation(
        &self,
        id: ReconciliationItemId,
        scope: &TenantScope,
    ) -> Result<Option<ReconciliationItem>, StoreError> {
        review::get_reconciliation(&self.pool, id, scope).await
    }

    async fn reconciliation_for_intent(
        &self,
        intent_id: IntentId,
    ) -> Result<Vec<ReconciliationItem>, StoreError> {
        review::reconciliation_for_intent(&self.pool, intent_id).await
    }

    async fn resolve_reconciliation(
        &self,
        resolution: &Resolution,
    ) -> Result<ReconciliationItem, ReviewError> {
        review::resolve_reconciliation(&self.pool, resolution).await
    }

    async fn cancel_intent(&self, cancellation: &Cancellation) -> Result<IntentRow, ReviewError> {
        review::cancel_intent(&self.pool, cancellation).await
    }

    async fn record_probe_finding(
        &self,
        item_id: ReconciliationItemId,
        finding: &str,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        review::record_probe_finding(&self.pool, item_id, finding, now).await
    }

    async fn append_audit(&self, entry: &NewAuditEntry) -> Result<AuditEntryId, StoreError> {
        review::append_audit(&self.pool, entry).await
    }

    async fn search_audit(&self, filter: &AuditFilter) -> Result<Vec<AuditEntry>, StoreError> {
        review::search_audit(&self.pool, filter).await
    }

    async fn console_counts(
        &self,
        scope: &TenantScope,
        now: DateTime<Utc>,
    ) -> Result<ConsoleCounts, StoreError> {
        console::console_counts(&self.pool, scope, now).await
    }

    async fn recent_attempt_ends(
        &self,
        scope: &TenantScope,
        since: DateTime<Utc>,
        scan_limit: u32,
    ) -> Result<Vec<AttemptEnd>, StoreError> {
        console::recent_attempt_ends(&self.pool, scope, since, scan_limit).await
    }

    async fn search_intents(&self, search: &IntentSearch) -> Result<Vec<IntentRow>, StoreError> {
        console::search_intents(&self.pool, search).await
    }

    async fn ordering_blocker(
        &self,
        intent: &IntentRow,
    ) -> Result<Option<(IntentId, IntentState)>, StoreError> {
        console::ordering_blocker(&self.pool, intent).await
    }

    async fn redispatch_failed(&self, redispatch: &Redispatch) -> Result<IntentRow, ReviewError> {
        console::redispatch_failed(&self.pool, redispatch).await
    }

    async fn prune_finished(
        &self,
        finished_before: DateTime<Utc>,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<u64, StoreError> {
        retention::prune_finished(&self.pool, finished_before, now, limit).await
    }

    async fn prune_tombstones(
        &self,
        finished_before: DateTime<Utc>,
        limit: u32,
    ) -> Result<u64, StoreError> {
        retention::prune_tombstones(&self.pool, finished_before, limit).await
    }

    async fn find_tombstone(
        &self,
        tenant: &TenantId,
        operation_id: &OperationId,
    ) -> Result<Option<Tombstone>, StoreError> {
        retention::find_tombstone(&self.pool, tenant, operation_id).await
    }
}
