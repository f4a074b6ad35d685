//! Values for the people side of the store: tenant scopes, reconciliation items and their
//! resolutions, cancellations, the audit log, and retention tombstones.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use super::{AuditEntryId, IntentRow, ReconciliationItemId, StoreError};
use crate::intent::{ActionName, IdempotencyKey, IntentId, InvalidField, OperationId, TenantId};

/// Which tenants a caller may see and touch. Every admin read and write is scoped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TenantScope {
    /// Every tenant (an operator token with `tenants = ["*"]`, or the local CLI).
    All,
    /// Only these tenants.
    Only(Vec<String>),
}

impl TenantScope {
    /// Whether `tenant` is inside the scope.
    pub fn allows(&self, tenant: &str) -> bool {
        match self {
            TenantScope::All => true,
            TenantScope::Only(tenants) => tenants.iter().any(|t| t == tenant),
        }
    }

    /// The tenant list for SQL (`None` = all).
    pub fn as_list(&self) -> Option<Vec<String>> {
        match self {
            TenantScope::All => None,
            TenantScope::Only(tenants) => Some(tenants.clone()),
        }
    }
}

/// One reconciliation item with the intent facts a reviewer needs.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ReconciliationItem {
    /// Item id.
    pub id: ReconciliationItemId,
    /// The intent whose outcome is unknown.
    pub intent_id: IntentId,
    /// Tenant.
    pub tenant: TenantId,
    /// Operation id.
    pub operation_id: OperationId,
    /// Action.
    pub action: ActionName,
    /// The downstream idempotency key (what to search for at the provider).
    pub idempotency_key: IdempotencyKey,
    /// Why the outcome is unknown.
    pub reason: String,
    /// When the item was opened.
    pub opened_at: DateTime<Utc>,
    /// `delivered`, `redispatch` or `abandoned` once resolved.
    #[schema(schema_with = super::schema::resolution_or_null)]
    pub resolution: Option<String>,
    /// Who resolved it (a token name, `probe`, or the CLI user).
    pub resolved_by: Option<String>,
    /// When.
    pub resolved_at: Option<DateTime<Utc>>,
    /// Why (required).
    pub resolution_note: Option<String>,
    /// The provider reference given with a `delivered` resolution.
    pub resolved_provider_ref: Option<String>,
    /// The latest automatic probe's finding.
    pub probe_finding: Option<String>,
    /// When the last probe ran.
    pub probe_checked_at: Option<DateTime<Utc>>,
    /// Probes run so far.
    pub probe_count: i32,
}

/// Filter for listing reconciliation items (oldest first).
#[derive(Debug, Clone)]
pub struct ReconciliationFilter {
    /// Tenants the caller may see.
    pub scope: TenantScope,
    /// Only unresolved items.
    pub open_only: bool,
    /// Only this action.
    pub action: Option<String>,
    /// Only items opened before this instant.
    pub opened_before: Option<DateTime<Utc>>,
    /// Only ids greater than this.
    pub after_id: Option<ReconciliationItemId>,
    /// At most this many.
    pub limit: u32,
}

impl ReconciliationFilter {
    /// Open items of every tenant in `scope`, oldest first, up to `limit`.
    pub fn open(scope: TenantScope, limit: u32) -> Self {
        Self {
            scope,
            open_only: true,
            action: None,
            opened_before: None,
            after_id: None,
            limit,
        }
    }
}

/// How a person (or a probe) resolves an unknown outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolutionKind {
    /// It happened; the provider's reference proves it.
    Delivered {
        /// The provider's reference (required).
        provider_ref: String,
    },
    /// Send again with the same idempotency key (a new retry budget starts).
    Redispatch,
    /// Do not pursue; terminal.
    Abandoned,
}

impl ResolutionKind {
    /// The stored name.
    pub fn as_str(&self) -> &'static str {
        match self {
            ResolutionKind::Delivered { .. } => "delivered",
            ResolutionKind::Redispatch => "redispatch",
            ResolutionKind::Abandoned => "abandoned",
        }
    }
}

/// A resolution request.
#[derive(Debug, Clone)]
pub struct Resolution {
    /// The reconciliation item.
    pub item_id: ReconciliationItemId,
    /// The caller's tenants; an item outside them is "not found".
    pub scope: TenantScope,
    /// What to do.
    pub kind: ResolutionKind,
    /// Who.
    pub actor: String,
    /// Why (required, non-empty).
    pub note: String,
    /// When.
    pub now: DateTime<Utc>,
    /// For a redispatch: what the resend rule needs, and the person's confirmation.
    pub resend: super::ResendApproval,
    /// The intent's attempt count a dry run showed (None: no dry run); a different one
    /// refuses.
    pub seen_attempt_count: Option<i32>,
}

/// Why a resolution or cancellation did not apply. Each variant's fields are declared
/// here only: the admin API and the CLI wrap this error as it is and decide their status
/// code or exit code from its variant.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// No such item or intent in the caller's scope.
    #[error("not found")]
    NotFound,
    /// Someone else resolved it first.
    #[error("already resolved as {resolution} by {resolved_by} at {resolved_at}")]
    AlreadyResolved {
        /// Their resolution.
        resolution: String,
        /// Who.
        resolved_by: String,
        /// When.
        resolved_at: DateTime<Utc>,
    },
    /// The intent is not in a state this change applies to.
    #[error("intent is {state}; {what}")]
    WrongState {
        /// Current state.
        state: String,
        /// What was expected.
        what: &'static str,
    },
    /// A required field is missing or malformed; the error names the field
    /// (`invalid note: ...`).
    #[error(transparent)]
    Invalid(InvalidField),
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<sqlx::Error> for ReviewError {
    fn from(e: sqlx::Error) -> Self {
        ReviewError::Store(StoreError::Database(e))
    }
}

/// The note rule, for resolutions and cancellations alike: a change says why. Returns the
/// note without surrounding whitespace.
pub fn check_note(note: &str) -> Result<&str, ReviewError> {
    let note = note.trim();
    if note.is_empty() {
        return Err(ReviewError::Invalid(InvalidField::new(
            "note",
            "a note saying why is required",
        )));
    }
    Ok(note)
}

/// Checks a resolution's required fields.
pub fn check_resolution(r: &Resolution) -> Result<(), ReviewError> {
    check_note(&r.note)?;
    if r.actor.trim().is_empty() {
        return Err(ReviewError::Invalid(InvalidField::new(
            "actor",
            "the actor is required",
        )));
    }
    if let ResolutionKind::Delivered { provider_ref } = &r.kind {
        if provider_ref.trim().is_empty() {
            return Err(ReviewError::Invalid(InvalidField::new(
                "provider_ref",
                "resolving as delivered requires the provider reference",
            )));
        }
    }
    Ok(())
}

/// A cancellation request for a pending intent.
#[derive(Debug, Clone)]
pub struct Cancellation {
    /// The intent.
    pub intent_id: IntentId,
    /// The caller's tenants.
    pub scope: TenantScope,
    /// Who.
    pub actor: String,
    /// Why.
    pub note: String,
    /// When.
    pub now: DateTime<Utc>,
    /// The intent's attempt count a dry run showed (None: no dry run); a different one
    /// refuses.
    pub seen_attempt_count: Option<i32>,
}

/// One audit log entry to append.
#[derive(Debug, Clone)]
pub struct NewAuditEntry {
    /// Who.
    pub actor: String,
    /// What (`reconciliation.resolve`, `intent.cancel`, `intent.enqueue`, ...).
    pub action: String,
    /// Tenant concerned.
    pub tenant: Option<TenantId>,
    /// Intent concerned.
    pub intent_id: Option<IntentId>,
    /// Structured details.
    pub details: Value,
    /// Why.
    pub note: Option<String>,
    /// When.
    pub at: DateTime<Utc>,
}

/// One audit log entry.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct AuditEntry {
    /// Entry id (append order).
    pub id: AuditEntryId,
    /// When.
    pub at: DateTime<Utc>,
    /// Who.
    pub actor: String,
    /// What.
    pub action: String,
    /// Tenant.
    pub tenant: Option<TenantId>,
    /// Intent.
    pub intent_id: Option<IntentId>,
    /// Details.
    pub details: Value,
    /// Why.
    pub note: Option<String>,
}

/// What is kept of a pruned intent, to answer a late enqueue.
#[derive(Debug, Clone, Serialize)]
pub struct Tombstone {
    /// Tenant.
    pub tenant: TenantId,
    /// Operation id.
    pub operation_id: OperationId,
    /// The pruned intent's id.
    pub intent_id: IntentId,
    /// Its digest.
    pub payload_sha256: String,
    /// Its final state.
    pub final_state: String,
    /// Its provider reference.
    pub provider_ref: Option<String>,
    /// When it was pruned.
    pub pruned_at: DateTime<Utc>,
}

/// The result of a scoped intent lookup with its attempts.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct IntentDetail {
    /// The intent.
    pub intent: IntentRow,
    /// Its attempts, oldest first.
    pub attempts: Vec<super::AttemptRow>,
    /// Its reconciliation items, oldest first.
    pub reconciliation: Vec<ReconciliationItem>,
}
