//! The operator's resolution in scene 3: an `unknown` intent recorded as `delivered` with
//! the reference found at the provider, saying who resolved it, when and why.
//!
//! This branch has no store method for resolutions yet, so the demo writes the rows
//! itself, on its own temporary SQLite database only.

use chrono::Utc;
use serde_json::json;

use super::DemoError;
use crate::intent::IntentId;
use crate::store::Database;

/// A person's decision about one reconciliation item.
#[derive(Debug, Clone)]
pub(super) struct Resolution {
    /// The intent in reconciliation.
    pub intent_id: IntentId,
    /// The reference the person found at the provider.
    pub provider_ref: String,
    /// Who decided.
    pub who: String,
    /// When.
    pub at: chrono::DateTime<Utc>,
    /// Why.
    pub why: String,
}

// TODO(reconcile): replace this direct SQL with the store's resolution method (and its
// audit record) once the reconciliation work lands.
/// Closes the open reconciliation item of `r.intent_id` as `delivered`, moves the intent
/// from `unknown` to `delivered` with the reference, and writes an audit record — in one
/// transaction; fails (changing nothing) unless exactly that item and state are found.
pub(super) async fn resolve_delivered(db: &Database, r: &Resolution) -> Result<(), DemoError> {
    let Database::Sqlite(pool) = db else {
        return Err(DemoError::OffScript("the demo database is SQLite".into()));
    };
    let now = r.at.timestamp_millis();
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let item = sqlx::query(
        "UPDATE outbox_reconciliation_items SET resolution = 'delivered', resolved_by = ?2, \
         resolved_at = ?3, resolution_note = ?4, resolved_provider_ref = ?5 \
         WHERE intent_id = ?1 AND resolved_at IS NULL",
    )
    .bind(r.intent_id)
    .bind(&r.who)
    .bind(now)
    .bind(&r.why)
    .bind(&r.provider_ref)
    .execute(&mut *tx)
    .await?;
    let tenant: Option<String> = sqlx::query_scalar(
        "UPDATE outbox_intents SET state = 'delivered', provider_ref = ?2, finished_at = ?3, \
         updated_at = ?3 WHERE id = ?1 AND state = 'unknown' RETURNING tenant",
    )
    .bind(r.intent_id)
    .bind(&r.provider_ref)
    .bind(now)
    .fetch_optional(&mut *tx)
    .await?;
    let (1, Some(tenant)) = (item.rows_affected(), tenant) else {
        return Err(DemoError::OffScript(format!(
            "intent #{} has no open reconciliation item in state unknown",
            r.intent_id
        )));
    };
    let details = json!({"resolution": "delivered", "provider_ref": r.provider_ref});
    sqlx::query(
        "INSERT INTO outbox_audit_log (at, actor, action, tenant, intent_id, details, note) \
         VALUES (?1, ?2, 'resolve', ?3, ?4, ?5, ?6)",
    )
    .bind(now)
    .bind(&r.who)
    .bind(tenant)
    .bind(r.intent_id)
    .bind(details.to_string())
    .bind(&r.why)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}
