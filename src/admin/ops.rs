//! The operations the JSON API and the review page share, each scoped to the caller:
//! reading one intent or reconciliation item with its history, and resolving an item.
//! Handlers only parse and render around these.

use chrono::Utc;
use serde::Serialize;

use super::auth::Caller;
use super::{AdminContext, ApiError};
use crate::intent::IntentId;
use crate::store::{
    AttemptRow, IntentDetail, IntentRow, ReconciliationItem, ReconciliationItemId, Resolution,
    ResolutionKind,
};

/// A reconciliation item with the intent it is about and that intent's attempts.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub(crate) struct ItemDetail {
    /// The item.
    pub item: ReconciliationItem,
    /// Its intent (payload included).
    pub intent: IntentRow,
    /// Every attempt of the intent, oldest first.
    pub attempts: Vec<AttemptRow>,
}

/// One intent inside the caller's tenants, with attempts and reconciliation items.
pub(crate) async fn intent_detail(
    ctx: &AdminContext,
    caller: &Caller,
    id: IntentId,
) -> Result<IntentDetail, ApiError> {
    let intent = ctx
        .store
        .get_intent(id)
        .await?
        .filter(|i| caller.scope.allows(i.tenant.as_str()))
        .ok_or(ApiError::NotFound)?;
    let attempts = ctx.store.list_attempts(id).await?;
    let reconciliation = ctx.store.reconciliation_for_intent(id).await?;
    Ok(IntentDetail {
        intent,
        attempts,
        reconciliation,
    })
}

/// One reconciliation item inside the caller's tenants, with its intent and attempts.
pub(crate) async fn item_detail(
    ctx: &AdminContext,
    caller: &Caller,
    item_id: ReconciliationItemId,
) -> Result<ItemDetail, ApiError> {
    let item = ctx
        .store
        .get_reconciliation(item_id, &caller.scope)
        .await?
        .ok_or(ApiError::NotFound)?;
    let intent = ctx
        .store
        .get_intent(item.intent_id)
        .await?
        .ok_or(ApiError::NotFound)?;
    let attempts = ctx.store.list_attempts(item.intent_id).await?;
    Ok(ItemDetail {
        item,
        intent,
        attempts,
    })
}

/// Builds a resolution kind from its name and the provider reference field.
pub(crate) fn resolution_kind(
    name: &str,
    provider_ref: Option<&str>,
) -> Result<ResolutionKind, ApiError> {
    let provider_ref = provider_ref.map(str::trim).filter(|r| !r.is_empty());
    match name {
        "delivered" => provider_ref
            .map(|r| ResolutionKind::Delivered {
                provider_ref: r.to_owned(),
            })
            .ok_or_else(|| {
                ApiError::invalid(
                    "provider_ref",
                    "resolving as delivered requires the provider's reference",
                )
            }),
        "redispatch" | "abandoned" if provider_ref.is_some() => Err(ApiError::invalid(
            "provider_ref",
            "a provider reference only goes with a delivered resolution",
        )),
        "redispatch" => Ok(ResolutionKind::Redispatch),
        "abandoned" => Ok(ResolutionKind::Abandoned),
        _ => Err(ApiError::invalid(
            "resolution",
            "must be delivered, redispatch or abandoned",
        )),
    }
}

/// A required note, trimmed (the store's note rule).
pub(crate) fn required_note(note: Option<&str>) -> Result<String, ApiError> {
    Ok(crate::store::check_note(note.unwrap_or(""))?.to_owned())
}

/// What a person asks of one reconciliation item.
#[derive(Debug, Clone)]
pub(crate) struct ResolveRequest {
    /// The resolution.
    pub kind: ResolutionKind,
    /// Why (already checked by [`required_note`]).
    pub note: String,
    /// The person confirmed that a redispatch may act twice (`confirm_may_act_twice`).
    pub confirmed_may_act_twice: bool,
    /// The intent's attempt count a dry run showed (None: no dry run).
    pub seen_attempt_count: Option<i32>,
}

impl ResolveRequest {
    /// A request without a dry run.
    pub(crate) fn new(kind: ResolutionKind, note: String, confirmed_may_act_twice: bool) -> Self {
        Self {
            kind,
            note,
            confirmed_may_act_twice,
            seen_attempt_count: None,
        }
    }
}

/// Resolves an open item as the caller (operator only), then pokes the local dispatcher
/// if the intent went back to pending. Of two concurrent resolutions exactly one applies;
/// the other gets [`crate::store::ReviewError::AlreadyResolved`]. A redispatch that may act twice (the
/// resend rule, checked by the store on the row it changes) needs
/// `confirmed_may_act_twice`, or is refused naming that field.
pub(crate) async fn resolve(
    ctx: &AdminContext,
    caller: &Caller,
    item_id: ReconciliationItemId,
    request: ResolveRequest,
) -> Result<ReconciliationItem, ApiError> {
    caller.require_operator()?;
    let redispatch = request.kind == ResolutionKind::Redispatch;
    let resolution = Resolution {
        item_id,
        scope: caller.scope.clone(),
        kind: request.kind,
        actor: caller.name.clone(),
        note: request.note,
        now: Utc::now(),
        resend: ctx.resend_approval(request.confirmed_may_act_twice),
        seen_attempt_count: request.seen_attempt_count,
    };
    let item = ctx.store.resolve_reconciliation(&resolution).await?;
    if redispatch {
        ctx.wake_dispatcher.notify_one();
    }
    Ok(item)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolution_fields_are_checked_together() {
        assert!(matches!(
            resolution_kind("delivered", Some(" re_1 ")).unwrap(),
            ResolutionKind::Delivered { provider_ref } if provider_ref == "re_1"
        ));
        for (name, reference, field) in [
            ("delivered", None, "provider_ref"),
            ("delivered", Some("  "), "provider_ref"),
            ("abandoned", Some("re_1"), "provider_ref"),
            ("retry", None, "resolution"),
        ] {
            match resolution_kind(name, reference) {
                Err(ApiError::Invalid(f)) => assert_eq!(f.field, field),
                other => panic!("{name}: {other:?}"),
            }
        }
        assert_eq!(
            resolution_kind("redispatch", None).unwrap(),
            ResolutionKind::Redispatch
        );
        assert!(required_note(Some("   ")).is_err());
        assert_eq!(required_note(Some(" why ")).unwrap(), "why");
    }
}
