//! The operator's resolution in scene 3: an `unknown` intent recorded as `delivered` with
//! the reference found at the provider, saying who resolved it, when and why.
//!

use chrono::Utc;

use super::DemoError;
use crate::intent::IntentId;
use crate::store::{Database, ResolutionKind, TenantScope};

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

/// Resolves the open reconciliation item of `r.intent_id` as `delivered` through the
/// store (the same call the admin API, the review page and the CLI make): the item is
/// closed, the intent moves from `unknown` to `delivered` with the reference, and an audit
/// entry records who, when and why — in one transaction.
pub(super) async fn resolve_delivered(db: &Database, r: &Resolution) -> Result<(), DemoError> {
    let store = db.store();
    let items = store.reconciliation_for_intent(r.intent_id).await?;
    let Some(open) = items.iter().find(|i| i.resolved_at.is_none()) else {
        return Err(DemoError::OffScript(format!(
            "intent #{} has no open reconciliation item",
            r.intent_id
        )));
    };
    store
        .resolve_reconciliation(&crate::store::Resolution {
            item_id: open.id,
            scope: TenantScope::All,
            kind: ResolutionKind::Delivered {
                provider_ref: r.provider_ref.clone(),
            },
            actor: r.who.clone(),
            note: r.why.clone(),
            now: r.at,
            resend: Default::default(),
            seen_attempt_count: None,
        })
        .await
        .map_err(|source| DemoError::Resolve {
            intent_id: r.intent_id,
            source,
        })?;
    Ok(())
}
