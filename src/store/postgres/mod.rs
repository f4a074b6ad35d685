//! The PostgreSQL store: `FOR UPDATE SKIP LOCKED` claims committed before any network
//! call, batched fenced outcome writes, and the read models. Statements live in
//! [`claims`] (the dispatcher's hot path) and [`reads`] (status and review).

mod claims;
mod reads;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::PgPool;

use super::{
    AttemptRow, ClaimRequest, ClaimedIntent, IntentFilter, IntentRow, OutboxStore, OutcomeRecord,
    RecordResult, Release, StatusSummary, StoreError,
};
use crate::intent::IntentId;

/// The PostgreSQL implementation of [`OutboxStore`].
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
}

impl PgStore {
    /// Wraps a pool whose database is migrated.
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
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

    async fn claim_due(&self, req: &ClaimRequest) -> Result<Vec<ClaimedIntent>, StoreError> {
        claims::claim_due(&self.pool, req).await
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

    async fn get_intent(&self, id: IntentId) -> Result<Option<IntentRow>, StoreError> {
        reads::get_intent(&self.pool, id).await
    }

    async fn find_intent(
        &self,
        tenant: &str,
        operation_id: &str,
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
}
