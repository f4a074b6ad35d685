//! Rows as PostgreSQL returns them (times as `timestamptz`, JSON as `jsonb`) turned into
//! the store's values. Each mapper is the dialect twin of the one of the same name in
//! `sqlite/rows.rs`, which reads times as Unix milliseconds.

use sqlx::postgres::PgRow;
use sqlx::types::Json;
use sqlx::Row;

use crate::intent::{ActionName, IdempotencyKey, OperationId, OrderingKey, TenantId};
use crate::store::{
    parse_class, parse_state, AttemptRow, AuditEntry, ClaimedIntent, IntentRow, PayloadBody,
    ReconciliationItem, StoreError, StoredPayload, Tombstone,
};

/// The columns [`intent_from_row`] reads.
pub(super) const INTENT_COLUMNS: &str = "id, tenant, operation_id, action, payload_version, payload::text AS payload, \
    payload_sha256, idempotency_key, ordering_key, state, attempt_count, ambiguous_attempts, \
    first_sent_at, next_attempt_at, deadline_at, lease_owner, lease_expires_at, attempt_started_at, fencing_token, \
    provider_ref, last_error, last_http_status, created_at, updated_at, finished_at";

/// The reconciliation items with their intents' facts, for [`item_from_row`].
pub(super) const ITEM_SELECT: &str =
    "SELECT r.id, r.intent_id, r.tenant, i.operation_id, i.action, \
    i.idempotency_key, r.reason, r.opened_at, r.resolution, r.resolved_by, r.resolved_at, \
    r.resolution_note, r.resolved_provider_ref, r.probe_finding, r.probe_checked_at, r.probe_count \
    FROM outbox_reconciliation_items r JOIN outbox_intents i ON i.id = r.intent_id";

// Dialect twin of sqlite/rows.rs intent_from_row: the same columns, times as timestamptz.
pub(super) fn intent_from_row(row: &PgRow) -> Result<IntentRow, StoreError> {
    let payload = StoredPayload::from_stored(
        row.try_get::<String, _>("payload")?.into_bytes(),
        row.try_get("id")?,
    );
    let state: String = row.try_get("state")?;
    Ok(IntentRow {
        id: row.try_get("id")?,
        tenant: TenantId::from_store(row.try_get("tenant")?),
        operation_id: OperationId::from_store(row.try_get("operation_id")?),
        action: ActionName::from_store(row.try_get("action")?),
        payload_version: row.try_get("payload_version")?,
        payload,
        payload_sha256: row.try_get("payload_sha256")?,
        idempotency_key: IdempotencyKey::from_store(row.try_get("idempotency_key")?),
        ordering_key: row
            .try_get::<Option<String>, _>("ordering_key")?
            .map(OrderingKey::from_store),
        state: parse_state(&state)?,
        attempt_count: row.try_get("attempt_count")?,
        ambiguous_attempts: row.try_get("ambiguous_attempts")?,
        first_sent_at: row.try_get("first_sent_at")?,
        next_attempt_at: row.try_get("next_attempt_at")?,
        deadline_at: row.try_get("deadline_at")?,
        lease_owner: row.try_get("lease_owner")?,
        lease_expires_at: row.try_get("lease_expires_at")?,
        attempt_started_at: row.try_get("attempt_started_at")?,
        fencing_token: row.try_get("fencing_token")?,
        provider_ref: row.try_get("provider_ref")?,
        last_error: row.try_get("last_error")?,
        last_http_status: row.try_get("last_http_status")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        finished_at: row.try_get("finished_at")?,
    })
}

// Dialect twin of sqlite/rows.rs attempt_from_row: the same columns, times as timestamptz.
pub(super) fn attempt_from_row(row: &PgRow) -> Result<AttemptRow, StoreError> {
    Ok(AttemptRow {
        id: row.try_get("id")?,
        intent_id: row.try_get("intent_id")?,
        attempt_number: row.try_get("attempt_number")?,
        fencing_token: row.try_get("fencing_token")?,
        owner: row.try_get("owner")?,
        started_at: row.try_get("started_at")?,
        ended_at: row.try_get("ended_at")?,
        class: parse_class(row.try_get("class")?)?,
        http_status: row.try_get("http_status")?,
        error: row.try_get("error")?,
        provider_ref: row.try_get("provider_ref")?,
        duration_ms: row.try_get("duration_ms")?,
    })
}

// Dialect twin of sqlite/rows.rs item_from_row: the same columns, times as timestamptz.
pub(super) fn item_from_row(row: &PgRow) -> Result<ReconciliationItem, StoreError> {
    Ok(ReconciliationItem {
        id: row.try_get("id")?,
        intent_id: row.try_get("intent_id")?,
        tenant: TenantId::from_store(row.try_get("tenant")?),
        operation_id: OperationId::from_store(row.try_get("operation_id")?),
        action: ActionName::from_store(row.try_get("action")?),
        idempotency_key: IdempotencyKey::from_store(row.try_get("idempotency_key")?),
        reason: row.try_get("reason")?,
        opened_at: row.try_get("opened_at")?,
        resolution: row.try_get("resolution")?,
        resolved_by: row.try_get("resolved_by")?,
        resolved_at: row.try_get("resolved_at")?,
        resolution_note: row.try_get("resolution_note")?,
        resolved_provider_ref: row.try_get("resolved_provider_ref")?,
        probe_finding: row.try_get("probe_finding")?,
        probe_checked_at: row.try_get("probe_checked_at")?,
        probe_count: row.try_get("probe_count")?,
    })
}

// Dialect twin of sqlite/rows.rs claimed_from_row: PostgreSQL returns the claim's clock
// reading as a column, SQLite passes it in.
pub(super) fn claimed_from_row(row: &PgRow) -> Result<ClaimedIntent, StoreError> {
    let payload = PayloadBody::from_stored(
        row.try_get::<String, _>("payload")?.into_bytes(),
        row.try_get("id")?,
    );
    Ok(ClaimedIntent {
        id: row.try_get("id")?,
        tenant: TenantId::from_store(row.try_get("tenant")?),
        operation_id: OperationId::from_store(row.try_get("operation_id")?),
        action: ActionName::from_store(row.try_get("action")?),
        payload,
        payload_version: row.try_get("payload_version")?,
        idempotency_key: IdempotencyKey::from_store(row.try_get("idempotency_key")?),
        attempt_count: row.try_get("attempt_count")?,
        ambiguous_attempts: row.try_get("ambiguous_attempts")?,
        fencing_token: row.try_get("fencing_token")?,
        first_sent_at: row.try_get("first_sent_at")?,
        created_at: row.try_get("created_at")?,
        deadline_at: row.try_get("deadline_at")?,
        budget_attempt_base: row.try_get("budget_attempt_base")?,
        budget_started_at: row.try_get("budget_started_at")?,
        resend_confirmed_attempt: row.try_get("resend_confirmed_attempt")?,
        next_attempt_at: row.try_get("next_attempt_at")?,
        lease_expires_at: row.try_get("lease_expires_at")?,
        claimed_at: row.try_get("claimed_at")?,
    })
}

// Dialect twin of sqlite/rows.rs audit_from_row: details as jsonb, not text.
pub(super) fn audit_from_row(row: &PgRow) -> Result<AuditEntry, StoreError> {
    let details: Json<serde_json::Value> = row.try_get("details")?;
    Ok(AuditEntry {
        id: row.try_get("id")?,
        at: row.try_get("at")?,
        actor: row.try_get("actor")?,
        action: row.try_get("action")?,
        tenant: row
            .try_get::<Option<String>, _>("tenant")?
            .map(TenantId::from_store),
        intent_id: row.try_get("intent_id")?,
        details: details.0,
        note: row.try_get("note")?,
    })
}

// Dialect twin of sqlite/rows.rs tombstone_from_row: `pruned_at` as timestamptz.
pub(super) fn tombstone_from_row(row: &PgRow) -> Result<Tombstone, StoreError> {
    Ok(Tombstone {
        tenant: TenantId::from_store(row.try_get("tenant")?),
        operation_id: OperationId::from_store(row.try_get("operation_id")?),
        intent_id: row.try_get("intent_id")?,
        payload_sha256: row.try_get("payload_sha256")?,
        final_state: row.try_get("final_state")?,
        provider_ref: row.try_get("provider_ref")?,
        pruned_at: row.try_get("pruned_at")?,
    })
}
