//! Recording an intent in a transaction of its own, for the daemon's own producers: the
//! admin API's `POST /v1/intents` (with its audit entry in the same transaction) and
//! `outboxd enqueue`. Services that share a transaction with their business write call
//! [`crate::enqueue`] on it instead. The backends differ only in how the transaction is
//! opened (SQLite: `BEGIN IMMEDIATE`, so concurrent writers queue for the lock instead of
//! failing on upgrade) and where the audit entry is written.

use serde_json::json;

use super::{postgres, sqlite, Database, NewAuditEntry, StoreError};
use crate::{EnqueueError, Enqueued, NewIntent};

/// Why [`Database::enqueue_committed`] recorded nothing.
#[derive(Debug, thiserror::Error)]
pub enum CommittedEnqueueError {
    /// The intent was refused (invalid, conflicting, pruned) or the database failed.
    #[error(transparent)]
    Enqueue(#[from] EnqueueError),
    /// The audit entry could not be written (the intent was rolled back with it).
    #[error(transparent)]
    Audit(#[from] StoreError),
}

impl From<sqlx::Error> for CommittedEnqueueError {
    fn from(e: sqlx::Error) -> Self {
        CommittedEnqueueError::Enqueue(EnqueueError::from(e))
    }
}

impl Database {
    /// Records `intent` in its own committed transaction.
    pub async fn enqueue_committed(&self, intent: NewIntent) -> Result<Enqueued, EnqueueError> {
        self.enqueue_audited(intent, None)
            .await
            .map_err(|e| match e {
                CommittedEnqueueError::Enqueue(e) => e,
                CommittedEnqueueError::Audit(e) => unreachable!("no audit entry to write: {e}"),
            })
    }

    /// Records `intent` in its own committed transaction and, unless it was a replay,
    /// `audit` in the same transaction (its `intent_id` and `details.idempotency_key` filled
    /// in from the receipt), so the intent and its audit entry commit together.
    pub async fn enqueue_audited(
        &self,
        intent: NewIntent,
        audit: Option<NewAuditEntry>,
    ) -> Result<Enqueued, CommittedEnqueueError> {
        let audit_for = |receipt: &Enqueued| {
            audit.clone().filter(|_| !receipt.replayed).map(|mut a| {
                a.intent_id = Some(receipt.intent_id);
                a.details["idempotency_key"] = json!(receipt.idempotency_key);
                a
            })
        };
        match self {
            Database::Postgres(pool) => {
                let mut tx = pool.begin().await?;
                let receipt = crate::enqueue(&mut tx, intent).await?;
                if let Some(entry) = audit_for(&receipt) {
                    postgres::append_audit_on(&mut tx, &entry).await?;
                }
                tx.commit().await?;
                Ok(receipt)
            }
            Database::Sqlite(pool) => {
                let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
                let receipt = crate::enqueue(&mut tx, intent).await?;
                if let Some(entry) = audit_for(&receipt) {
                    sqlite::append_audit_on(&mut tx, &entry).await?;
                }
                tx.commit().await?;
                Ok(receipt)
            }
        }
    }
}
