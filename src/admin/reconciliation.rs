//! `/v1/reconciliation` and `/v1/audit`: the open queue oldest first, one item with its
//! intent and attempt history, resolving an item, and the audit log (newest first).

use axum::extract::State;
use axum::Json;
use chrono::Utc;
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::Caller;
use super::extract::{
    non_empty, parse_limit, parse_older_than, ApiJson, ApiQuery, IdPath, DEFAULT_LIMIT, MAX_LIMIT,
};
use super::ops::{item_detail, required_note, resolution_kind, resolve, ResolveRequest};
use super::{AdminContext, ApiError};
use crate::store::{AuditEntryId, ReconciliationFilter, ReconciliationItemId};

/// Query of `GET /v1/reconciliation`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct QueueQuery {
    tenant: Option<String>,
    action: Option<String>,
    older_than: Option<String>,
    after_id: Option<ReconciliationItemId>,
    limit: Option<u32>,
}

/// `GET /v1/reconciliation`: open items of the caller's tenants, oldest first.
pub(crate) async fn list_reconciliation(
    State(ctx): State<AdminContext>,
    caller: Caller,
    ApiQuery(q): ApiQuery<QueueQuery>,
) -> Result<Json<Value>, ApiError> {
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
    Ok(Json(
        json!({"items": items, "next_after_id": next_after_id}),
    ))
}

/// `GET /v1/reconciliation/{id}`: the item, its intent and every attempt.
pub(crate) async fn show_reconciliation(
    State(ctx): State<AdminContext>,
    caller: Caller,
    IdPath(id): IdPath<ReconciliationItemId>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(json!(item_detail(&ctx, &caller, id).await?)))
}

/// Body of `POST /v1/reconciliation/{id}/resolve`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResolveBody {
    resolution: String,
    provider_ref: Option<String>,
    note: Option<String>,
    /// Required (`true`) for a redispatch that may act twice.
    #[serde(default)]
    confirm_may_act_twice: bool,
}

/// `POST /v1/reconciliation/{id}/resolve`: `200` with the resolved item, `409` with who
/// resolved it first and when, or `400` naming `confirm_may_act_twice` for a redispatch
/// that may act twice without `"confirm_may_act_twice": true`.
pub(crate) async fn resolve_item(
    State(ctx): State<AdminContext>,
    caller: Caller,
    IdPath(id): IdPath<ReconciliationItemId>,
    ApiJson(body): ApiJson<ResolveBody>,
) -> Result<Json<Value>, ApiError> {
    caller.require_operator()?;
    let kind = resolution_kind(&body.resolution, body.provider_ref.as_deref())?;
    let note = required_note(body.note.as_deref())?;
    let request = ResolveRequest::new(kind, note, body.confirm_may_act_twice);
    let item = resolve(&ctx, &caller, id, request).await?;
    Ok(Json(json!({ "item": item })))
}

/// Query of `GET /v1/audit`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuditQuery {
    before_id: Option<AuditEntryId>,
    limit: Option<u32>,
}

/// `GET /v1/audit`: audit entries of the caller's tenants, newest first. Entries without
/// a tenant are shown only to tokens for every tenant.
pub(crate) async fn list_audit(
    State(ctx): State<AdminContext>,
    caller: Caller,
    ApiQuery(q): ApiQuery<AuditQuery>,
) -> Result<Json<Value>, ApiError> {
    let limit = parse_limit(q.limit, DEFAULT_LIMIT, MAX_LIMIT)?;
    let entries = ctx
        .store
        .list_audit(&caller.scope, q.before_id, limit)
        .await?;
    let next_before_id = (entries.len() == limit as usize)
        .then(|| entries.last().map(|e| e.id))
        .flatten();
    Ok(Json(
        json!({"entries": entries, "next_before_id": next_before_id}),
    ))
}
