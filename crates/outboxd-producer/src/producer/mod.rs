//! The producer contract: [`enqueue`] records an intent inside the producer's own
//! transaction, so it commits or rolls back with the business write.
//!
//! * Same `(tenant, operation_id)` and same digest → the stored receipt, `replayed: true`.
//! * Same key, different digest → [`EnqueueError::Conflict`]; nothing changes.
//! * A key whose intent was pruned is answered from its tombstone, never executed again.
//!
//! Uniqueness is enforced by the database (`UNIQUE (tenant, operation_id)` with
//! `ON CONFLICT DO NOTHING`), never by check-then-insert. The SQL for each backend lives in
//! [`postgres`] and [`sqlite`]; validation and the digest are computed here, once.

mod postgres;
mod sqlite;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::digest::{payload_digest, PayloadDigest};
use crate::intent::{
    check_payload_version, default_idempotency_key, ActionName, IdempotencyKey, IntentId,
    IntentState, InvalidField, OperationId, OrderingKey, TenantId,
};

/// An intent as a producer describes it. Build with [`NewIntent::new`] and the `with_*`
/// methods; everything is validated by [`enqueue`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewIntent {
    /// The tenant the operation belongs to.
    pub tenant: String,
    /// The producer's identifier of this logical operation, stable across retries.
    pub operation_id: String,
    /// The configured action to perform (`issue_refund`).
    pub action: String,
    /// The action's arguments: a JSON object.
    pub payload: Value,
    /// The version of the payload's schema (default 1).
    #[serde(default = "default_payload_version")]
    pub payload_version: i32,
    /// The downstream idempotency key; derived from (tenant, operation_id, action) if absent.
    /// Either way the provider sees it namespaced by tenant ([`crate::wire_key`]).
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// Intents with the same ordering key (within a tenant) are attempted in enqueue order.
    #[serde(default)]
    pub ordering_key: Option<String>,
    /// Do not attempt before this instant.
    #[serde(default)]
    pub not_before: Option<DateTime<Utc>>,
    /// Stop retrying after this instant (the action's own deadline still applies).
    #[serde(default)]
    pub deadline: Option<DateTime<Utc>>,
}

fn default_payload_version() -> i32 {
    1
}

impl NewIntent {
    /// An intent with payload version 1 and no optional settings.
    pub fn new(
        tenant: impl Into<String>,
        operation_id: impl Into<String>,
        action: impl Into<String>,
        payload: Value,
    ) -> Self {
        Self {
            tenant: tenant.into(),
            operation_id: operation_id.into(),
            action: action.into(),
            payload,
            payload_version: 1,
            idempotency_key: None,
            ordering_key: None,
            not_before: None,
            deadline: None,
        }
    }

    /// Sets the payload version.
    pub fn with_payload_version(mut self, version: i32) -> Self {
        self.payload_version = version;
        self
    }

    /// Supplies the downstream idempotency key instead of the derived one.
    pub fn with_idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Sets the ordering key.
    pub fn with_ordering_key(mut self, key: impl Into<String>) -> Self {
        self.ordering_key = Some(key.into());
        self
    }

    /// Delays the first attempt.
    pub fn with_not_before(mut self, at: DateTime<Utc>) -> Self {
        self.not_before = Some(at);
        self
    }

    /// Sets an absolute deadline.
    pub fn with_deadline(mut self, at: DateTime<Utc>) -> Self {
        self.deadline = Some(at);
        self
    }

    /// Validates every field and computes the digest.
    pub fn validate(self) -> Result<ValidIntent, InvalidField> {
        let tenant = TenantId::parse(self.tenant)?;
        let operation_id = OperationId::parse(self.operation_id)?;
        let action = ActionName::parse(self.action)?;
        let payload_version = check_payload_version(self.payload_version)?;
        let digest = payload_digest(&action, payload_version, &self.payload)?;
        let requested_idempotency_key = self
            .idempotency_key
            .map(IdempotencyKey::parse)
            .transpose()?;
        let idempotency_key = match &requested_idempotency_key {
            Some(key) => key.clone(),
            None => default_idempotency_key(&tenant, &operation_id, &action),
        };
        let ordering_key = self.ordering_key.map(OrderingKey::parse).transpose()?;
        Ok(ValidIntent {
            tenant,
            operation_id,
            action,
            payload: self.payload,
            payload_version,
            digest,
            requested_idempotency_key,
            idempotency_key,
            ordering_key,
            not_before: self.not_before,
            deadline: self.deadline,
        })
    }
}

/// A [`NewIntent`] whose fields passed validation, with its digest and key computed.
#[derive(Debug, Clone)]
pub struct ValidIntent {
    /// See [`NewIntent::tenant`].
    pub tenant: TenantId,
    /// See [`NewIntent::operation_id`].
    pub operation_id: OperationId,
    /// See [`NewIntent::action`].
    pub action: ActionName,
    /// See [`NewIntent::payload`].
    pub payload: Value,
    /// See [`NewIntent::payload_version`].
    pub payload_version: i32,
    /// The canonical digest of (action, payload_version, payload).
    pub digest: PayloadDigest,
    /// The idempotency key as the producer supplied it (`None`: derive the default).
    pub requested_idempotency_key: Option<IdempotencyKey>,
    /// The logical key: the requested one, or the default derived from (tenant,
    /// operation_id, action). The provider sees it namespaced by tenant
    /// ([`crate::wire_key`]).
    pub idempotency_key: IdempotencyKey,
    /// See [`NewIntent::ordering_key`].
    pub ordering_key: Option<OrderingKey>,
    /// See [`NewIntent::not_before`].
    pub not_before: Option<DateTime<Utc>>,
    /// See [`NewIntent::deadline`].
    pub deadline: Option<DateTime<Utc>>,
}

/// The receipt of an enqueue: what happened to the request, not what is true now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Enqueued {
    /// The intent's id (for a tombstone replay, the id it had before pruning).
    pub intent_id: IntentId,
    /// The idempotency key the provider sees, stored with the intent (namespaced by
    /// tenant, as the `wire_key` module says).
    pub idempotency_key: String,
    /// True when this operation was already recorded with the same digest.
    pub replayed: bool,
    /// The intent's state when this receipt was issued.
    pub state: IntentState,
}

/// Why [`enqueue`] recorded nothing.
#[derive(Debug, thiserror::Error)]
pub enum EnqueueError {
    /// The operation id is already recorded with a different payload digest.
    #[error("conflict: operation {operation_id:?} of tenant {tenant:?} was already recorded with a different payload")]
    Conflict {
        /// The tenant.
        tenant: String,
        /// The operation id.
        operation_id: String,
    },
    /// A field is invalid; the error names it.
    #[error(transparent)]
    Invalid(#[from] InvalidField),
    /// The database failed; the producer's transaction should be rolled back and retried.
    #[error("database error while recording the intent: {0}")]
    Database(#[from] sqlx::Error),
    /// The installation's key secret could not be read (the schema is older than 0003).
    #[error(transparent)]
    KeySecret(#[from] crate::wire_key::KeySecretError),
}

/// A connection or transaction an intent can be recorded on.
///
/// Implemented for PostgreSQL and SQLite connections and transactions. Pass the
/// producer's open transaction so the intent commits with the business write.
#[async_trait]
pub trait OutboxTransaction: Send {
    /// Records an already validated intent (see [`enqueue`]).
    async fn enqueue_valid(&mut self, intent: &ValidIntent) -> Result<Enqueued, EnqueueError>;
}

/// Records `intent` in the producer's transaction `tx`.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// let mut tx = pool.begin().await?;
/// sqlx::query("UPDATE orders SET refund_requested = true WHERE id = 7").execute(&mut *tx).await?;
/// let receipt = outboxd_producer::enqueue(
///     &mut tx,
///     outboxd_producer::NewIntent::new("acme", "refund-order-7", "issue_refund",
///         serde_json::json!({"order_id": 7, "amount": 1250, "currency": "EUR"})),
/// ).await?;
/// tx.commit().await?;
/// println!("intent {} (replayed: {})", receipt.intent_id, receipt.replayed);
/// # Ok(()) }
/// ```
pub async fn enqueue<T>(tx: &mut T, intent: NewIntent) -> Result<Enqueued, EnqueueError>
where
    T: OutboxTransaction + ?Sized,
{
    let valid = intent.validate()?;
    tx.enqueue_valid(&valid).await
}
