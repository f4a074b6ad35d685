//! `/v1/reconciliation` and `/v1/audit`: the open queue oldest first, one item with its
//! intent and attempt history, resolving an item, and the audit log (newest first).

use axum::extract::State;
use axum::Json;
use chrono::Utc;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::auth::Caller;
use super::error::responses::{E400, E401, E403, E404, E409, E500};
use super::extract::{
    non_empty, parse_limit, parse_older_than, ApiJson, ApiQuery, IdPath, DEFAULT_LIMIT, MAX_LIMIT,
};
use super::ops::{
    item_detail, required_note, resolution_kind, resolve, ItemDetail, ResolveRequest,
};
use super::{AdminContext, ApiError};
use crate::store::{
    AuditEntry, AuditEntryId, ReconciliationFilter, ReconciliationItem, ReconciliationItemId,
};

/// Query of `GET /v1/reconciliation`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct QueueQuery {
    /// Only this tenant (intersected with the token's).
    tenant: Option<String>,
    /// Only this action.
    action: Option<String>,
    /// Whole seconds (`3600`) or a duration (`2h`, `1h 30m`): only those opened before
    /// now − older_than.
    older_than: Option<String>,
    /// Paging: only ids greater than this (`next_after_id` of the previous page).
    after_id: Option<ReconciliationItemId>,
    /// Page size, 1–500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u32>,
}

/// A page of `GET /v1/reconciliation`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ItemPage {
    /// Open items, oldest first.
    items: Vec<ReconciliationItem>,
    /// The `after_id` of the next page; null on the last page.
    #[schema(required = true)]
    next_after_id: Option<ReconciliationItemId>,
}

/// `GET /v1/reconciliation`: open items of the caller's tenants, oldest first.
#[utoipa::path(
    get,
    path = "/v1/reconciliation",
    tag = "reconciliation",
    operation_id = "listReconciliation",
    summary = "Open reconciliation items of the token's tenants, oldest first.",
    params(QueueQuery),
    responses(
        (status = 200, description = "A page of items.", body = ItemPage),
        (status = 400, response = E400),
        (status = 401, response = E401),
        (status = 500, response = E500),
    )
)]
pub(crate) async fn list_reconciliation(
    State(ctx): State<AdminContext>,
    caller: Caller,
    ApiQuery(q): ApiQuery<QueueQuery>,
) -> Result<Json<ItemPage>, ApiError> {
    let limit = parse_limit(q.limit, DEFAULT_LIMIT, MAX_LIMIT)?;
    let filter = ReconciliationFilter {
        scope: caller.scope_for(non_empty(q.tenant).as_deref()),
        open_only: true,
        action: non_empty(q.action),
        opened_before: parse_older_than(q.older_than.as_deref(), Utc::now())?,
        after_id: q.after_id,
        limit,
    };
    let items = ctx.store.list_reconciliation(&filter).await?;
    let next_after_id = (items.len() == limit as usize)
        .then(|| items.last().map(|i| i.id))
        .flatten();
    Ok(Json(ItemPage {
        items,
        next_after_id,
    }))
}

/// `GET /v1/reconciliation/{id}`: the item, its intent and every attempt.
#[utoipa::path(
    get,
    path = "/v1/reconciliation/{id}",
    tag = "reconciliation",
    operation_id = "showReconciliation",
    summary = "One item, its intent and every attempt.",
    params(("id" = ReconciliationItemId, Path, description = "The item's id.")),
    responses(
        (status = 200, description = "The item.", body = ItemDetail),
        (status = 401, response = E401),
        (status = 404, response = E404),
        (status = 500, response = E500),
    )
)]
pub(crate) async fn show_reconciliation(
    State(ctx): State<AdminContext>,
    caller: Caller,
    IdPath(id): IdPath<ReconciliationItemId>,
) -> Result<Json<ItemDetail>, ApiError> {
    Ok(Json(item_detail(&ctx, &caller, id).await?))
}

/// Body of `POST /v1/reconciliation/{id}/resolve`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResolveBody {
    /// How the item is resolved.
    #[schema(schema_with = crate::store::schema::resolution)]
    resolution: String,
    /// The provider's reference: required with `delivered`, refused otherwise.
    provider_ref: Option<String>,
    /// Why (required; audited).
    #[schema(required = true, value_type = String)]
    note: Option<String>,
    /// Required (`true`) for a redispatch that may make the provider act twice: a
    /// `not_idempotent` action (or one the daemon has not configured) after an ambiguous
    /// attempt, or an `idempotent_with_key` one whose key the provider may have forgotten
    /// (`first_sent_at + key_retention` is before the resend could land). Without it such a
    /// redispatch answers 400 with `error.field = "confirm_may_act_twice"` and the reason,
    /// and nothing changes.
    #[serde(default)]
    confirm_may_act_twice: bool,
}

/// The answer of `POST /v1/reconciliation/{id}/resolve`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResolvedItem {
    /// The item, now resolved.
    item: ReconciliationItem,
}

/// `POST /v1/reconciliation/{id}/resolve`: `200` with the resolved item, `409` with who
/// resolved it first and when, or `400` naming `confirm_may_act_twice` for a redispatch
/// that may act twice without `"confirm_may_act_twice": true`.
#[utoipa::path(
    post,
    path = "/v1/reconciliation/{id}/resolve",
    tag = "reconciliation",
    operation_id = "resolveReconciliation",
    summary = "Resolve an item as delivered (with the provider's reference), redispatch or abandoned (operator). A redispatch that may act twice needs `confirm_may_act_twice`.",
    params(("id" = ReconciliationItemId, Path, description = "The item's id.")),
    request_body = ResolveBody,
    responses(
        (status = 200, description = "The resolved item.", body = ResolvedItem),
        (status = 400, response = E400),
        (status = 401, response = E401),
        (status = 403, response = E403),
        (status = 404, response = E404),
        (status = 409, response = E409),
        (status = 500, response = E500),
    )
)]
pub(crate) async fn resolve_item(
    State(ctx): State<AdminContext>,
    caller: Caller,
    IdPath(id): IdPath<ReconciliationItemId>,
    ApiJson(body): ApiJson<ResolveBody>,
) -> Result<Json<ResolvedItem>, ApiError> {
    caller.require_operator()?;
    let kind = resolution_kind(&body.resolution, body.provider_ref.as_deref())?;
    let note = required_note(body.note.as_deref())?;
    let request = ResolveRequest::new(kind, note, body.confirm_may_act_twice);
    let item = resolve(&ctx, &caller, id, request).await?;
    Ok(Json(ResolvedItem { item }))
}

/// Query of `GET /v1/audit`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuditQuery {
    /// Paging: only ids smaller than this (`next_before_id` of the previous page).
    before_id: Option<AuditEntryId>,
    /// Page size, 1–500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u32>,
}

/// A page of `GET /v1/audit`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuditPage {
    /// Entries, newest first.
    entries: Vec<AuditEntry>,
    /// The `before_id` of the next page; null on the last page.
    #[schema(required = true)]
    next_before_id: Option<AuditEntryId>,
}

/// `GET /v1/audit`: audit entries of the caller's tenants, newest first. Entries without
/// a tenant are shown only to tokens for every tenant.
#[utoipa::path(
    get,
    path = "/v1/audit",
    tag = "audit",
    operation_id = "listAudit",
    summary = "Audit entries of the token's tenants, newest first.",
    description = "Entries without a tenant are shown only to tokens for every tenant.",
    params(AuditQuery),
    responses(
        (status = 200, description = "A page of entries.", body = AuditPage),
        (status = 400, response = E400),
        (status = 401, response = E401),
        (status = 500, response = E500),
    )
)]
pub(crate) async fn list_audit(
    State(ctx): State<AdminContext>,
    caller: Caller,
    ApiQuery(q): ApiQuery<AuditQuery>,
) -> Result<Json<AuditPage>, ApiError> {
    let limit = parse_limit(q.limit, DEFAULT_LIMIT, MAX_LIMIT)?;
    let entries = ctx
        .store
        .list_audit(&caller.scope, q.before_id, limit)
        .await?;
    let next_before_id = (entries.len() == limit as usize)
        .then(|| entries.last().map(|e| e.id))
        .flatten();
    Ok(Json(AuditPage {
        entries,
        next_before_id,
    }))
}
