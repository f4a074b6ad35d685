//! `/v1/intents`: list and show intents (with attempts and reconciliation items), cancel a
//! pending one, and `POST /v1/intents` for producers that cannot write to the database.

use axum::extract::State;
use axum::http::header::LOCATION;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::{IntoParams, ToSchema};

use super::auth::Caller;
use super::error::responses::{E400, E401, E403, E404, E500};
use super::extract::{
    non_empty, parse_limit, parse_older_than, parse_state, ApiJson, ApiQuery, IdPath,
    DEFAULT_LIMIT, MAX_LIMIT,
};
use super::ops::{intent_detail, required_note};
use super::{AdminContext, ApiError, ErrorBody, Forbidden};
use crate::intent::{IntentId, IntentState, TenantId};
use crate::producer::{Enqueued, NewIntent};
use crate::store::{
    Cancellation, CommittedEnqueueError, Database, IntentDetail, IntentFilter, IntentRow,
    NewAuditEntry,
};

/// Query of `GET /v1/intents`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct IntentQuery {
    /// Only this tenant (intersected with the token's).
    tenant: Option<String>,
    /// Only this state.
    #[param(value_type = Option<IntentState>)]
    state: Option<String>,
    /// Only this action.
    action: Option<String>,
    /// Whole seconds (`3600`) or a duration (`2h`, `1h 30m`): only those created before
    /// now − older_than.
    older_than: Option<String>,
    /// Paging: only ids greater than this (`next_after_id` of the previous page).
    after_id: Option<IntentId>,
    /// Page size, 1–500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u32>,
}

/// A page of `GET /v1/intents`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct IntentPage {
    /// The intents, by id.
    intents: Vec<IntentRow>,
    /// The `after_id` of the next page; null on the last page.
    #[schema(required = true)]
    next_after_id: Option<IntentId>,
}

/// `GET /v1/intents`: intents of the caller's tenants (narrowed by `tenant`), by id.
#[utoipa::path(
    get,
    path = "/v1/intents",
    tag = "intents",
    operation_id = "listIntents",
    summary = "Intents of the token's tenants, by id.",
    params(IntentQuery),
    responses(
        (status = 200, description = "A page of intents.", body = IntentPage),
        (status = 400, response = E400),
        (status = 401, response = E401),
        (status = 500, response = E500),
    )
)]
pub(crate) async fn list_intents(
    State(ctx): State<AdminContext>,
    caller: Caller,
    ApiQuery(q): ApiQuery<IntentQuery>,
) -> Result<Json<IntentPage>, ApiError> {
    let limit = parse_limit(q.limit, DEFAULT_LIMIT, MAX_LIMIT)?;
    let filter = IntentFilter {
        tenants: caller.scope_for(non_empty(q.tenant).as_deref()).as_list(),
        state: parse_state(q.state.as_deref())?,
        action: non_empty(q.action),
        created_before: parse_older_than(q.older_than.as_deref(), Utc::now())?,
        after_id: q.after_id,
        limit,
    };
    let intents = ctx.store.list_intents(&filter).await?;
    let next_after_id = (intents.len() == limit as usize)
        .then(|| intents.last().map(|i| i.id))
        .flatten();
    Ok(Json(IntentPage {
        intents,
        next_after_id,
    }))
}

/// `GET /v1/intents/{id}`: the intent, its attempts and its reconciliation items.
#[utoipa::path(
    get,
    path = "/v1/intents/{id}",
    tag = "intents",
    operation_id = "showIntent",
    summary = "One intent with its attempts and reconciliation items.",
    params(("id" = IntentId, Path, description = "The intent's id.")),
    responses(
        (status = 200, description = "The intent.", body = IntentDetail),
        (status = 401, response = E401),
        (status = 404, response = E404),
        (status = 500, response = E500),
    )
)]
pub(crate) async fn show_intent(
    State(ctx): State<AdminContext>,
    caller: Caller,
    IdPath(id): IdPath<IntentId>,
) -> Result<Json<IntentDetail>, ApiError> {
    Ok(Json(intent_detail(&ctx, &caller, id).await?))
}

/// Body of `POST /v1/intents/{id}/cancel`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CancelBody {
    /// Why (required; audited).
    #[schema(required = true, value_type = String)]
    note: Option<String>,
}

/// The answer of `POST /v1/intents/{id}/cancel`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CancelledIntent {
    /// The intent, now `cancelled`.
    intent: IntentRow,
}

/// `POST /v1/intents/{id}/cancel`: a pending intent becomes `cancelled` (audited).
#[utoipa::path(
    post,
    path = "/v1/intents/{id}/cancel",
    tag = "intents",
    operation_id = "cancelIntent",
    summary = "Cancel a pending intent (operator).",
    params(("id" = IntentId, Path, description = "The intent's id.")),
    request_body = CancelBody,
    responses(
        (status = 200, description = "The cancelled intent.", body = CancelledIntent),
        (status = 400, response = E400),
        (status = 401, response = E401),
        (status = 403, response = E403),
        (status = 404, response = E404),
        (status = 409, description = "`wrong_state`: the intent is no longer pending (with its `state`).", body = ErrorBody),
        (status = 500, response = E500),
    )
)]
pub(crate) async fn cancel_intent(
    State(ctx): State<AdminContext>,
    caller: Caller,
    IdPath(id): IdPath<IntentId>,
    ApiJson(body): ApiJson<CancelBody>,
) -> Result<Json<CancelledIntent>, ApiError> {
    caller.require_operator()?;
    let cancellation = Cancellation {
        intent_id: id,
        scope: caller.scope.clone(),
        actor: caller.name.clone(),
        note: required_note(body.note.as_deref())?,
        now: Utc::now(),
        seen_attempt_count: None,
    };
    let intent = ctx.store.cancel_intent(&cancellation).await?;
    Ok(Json(CancelledIntent { intent }))
}

/// Body of `POST /v1/intents`: [`NewIntent`], with unknown fields refused (a misspelt
/// `idempotency_key` must not silently become a derived key).
#[derive(Debug, Deserialize, ToSchema)]
#[schema(
    description = "One intent to record; unknown fields are refused (a misspelt `idempotency_key` must not silently become a derived key)."
)]
#[serde(deny_unknown_fields)]
pub(crate) struct EnqueueBody {
    /// The tenant (must be one of the token's).
    tenant: String,
    /// The producer's id of the operation, unique within the tenant; retry with the same
    /// one until a receipt comes back.
    operation_id: String,
    /// A configured action.
    action: String,
    /// Any JSON value the action takes (usually an object).
    payload: Value,
    /// The payload's version (default 1).
    #[serde(default = "first_version")]
    #[schema(default = 1, minimum = 1)]
    payload_version: i32,
    /// The key the provider sees; derived from tenant, operation id and action when absent.
    idempotency_key: Option<String>,
    /// Intents sharing an ordering key (within a tenant) are attempted in enqueue order.
    ordering_key: Option<String>,
    /// No attempt before this instant.
    not_before: Option<DateTime<Utc>>,
    /// No attempt starts at or after this instant.
    deadline: Option<DateTime<Utc>>,
}

fn first_version() -> i32 {
    1
}

impl From<EnqueueBody> for NewIntent {
    fn from(b: EnqueueBody) -> Self {
        NewIntent {
            tenant: b.tenant,
            operation_id: b.operation_id,
            action: b.action,
            payload: b.payload,
            payload_version: b.payload_version,
            idempotency_key: b.idempotency_key,
            ordering_key: b.ordering_key,
            not_before: b.not_before,
            deadline: b.deadline,
        }
    }
}

/// `POST /v1/intents`: records an intent in outboxd's own transaction (not the
/// producer's), with the library's replay and conflict semantics: `201` created, `200`
/// replayed, `409` conflict. The tenant is checked against the token before any lookup.
#[utoipa::path(
    post,
    path = "/v1/intents",
    tag = "intents",
    operation_id = "createIntent",
    summary = "Record one intent in outboxd's own transaction (operator; not atomic with the producer's write).",
    description = "Retry with the same `operation_id` until a receipt comes back: a replay answers 200 with `replayed: true`, a changed payload 409 `conflict`. A tenant outside the token's answers 403 before any lookup.",
    request_body = EnqueueBody,
    responses(
        (status = 201, description = "Recorded.", body = Enqueued,
            headers(("location" = String, description = "`/v1/intents/{intent_id}`"))),
        (status = 200, description = "A replay: the receipt of the intent already recorded (`replayed: true`).", body = Enqueued),
        (status = 400, response = E400),
        (status = 401, response = E401),
        (status = 403, response = E403),
        (status = 409, description = "`conflict`: the operation was already recorded with a different payload.", body = ErrorBody),
        (status = 500, response = E500),
    )
)]
pub(crate) async fn create_intent(
    State(ctx): State<AdminContext>,
    caller: Caller,
    ApiJson(body): ApiJson<EnqueueBody>,
) -> Result<Response, ApiError> {
    caller.require_operator()?;
    if !caller.scope.allows(&body.tenant) {
        return Err(Forbidden::TenantOutsideScope.into());
    }
    let intent = NewIntent::from(body);
    let audit = enqueue_audit(&caller, &intent);
    let receipt = enqueue_audited(&ctx.db, intent, audit).await?;
    if receipt.replayed {
        return Ok((StatusCode::OK, Json(receipt)).into_response());
    }
    ctx.wake_dispatcher.notify_one();
    let mut response = (StatusCode::CREATED, Json(&receipt)).into_response();
    if let Ok(location) = HeaderValue::from_str(&format!("/v1/intents/{}", receipt.intent_id)) {
        response.headers_mut().insert(LOCATION, location);
    }
    Ok(response)
}

/// The `intent.enqueue` audit entry (its intent id is filled in once known).
fn enqueue_audit(caller: &Caller, intent: &NewIntent) -> NewAuditEntry {
    NewAuditEntry {
        actor: caller.name.clone(),
        action: "intent.enqueue".into(),
        // Written only once the enqueue succeeded, so the tenant is valid by then.
        tenant: TenantId::parse(intent.tenant.clone()).ok(),
        intent_id: None,
        details: json!({
            "operation_id": intent.operation_id,
            "action": intent.action,
            "via": "POST /v1/intents",
        }),
        note: None,
        at: Utc::now(),
    }
}

/// Enqueues in a transaction of its own and, unless the request was a replay, appends the
/// audit entry in the same transaction, so the intent and its audit commit together.
async fn enqueue_audited(
    db: &Database,
    intent: NewIntent,
    audit: NewAuditEntry,
) -> Result<Enqueued, ApiError> {
    db.enqueue_audited(intent, Some(audit))
        .await
        .map_err(|e| match e {
            CommittedEnqueueError::Enqueue(e) => ApiError::from(e),
            CommittedEnqueueError::Audit(e) => ApiError::from(e),
        })
}
