//! `/v1/intents`: list and show intents (with attempts and reconciliation items), cancel a
//! pending one, and `POST /v1/intents` for producers that cannot write to the database.

use axum::extract::State;
use axum::http::header::LOCATION;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::Caller;
use super::extract::{
    non_empty, parse_limit, parse_older_than, parse_state, ApiJson, ApiQuery, IdPath,
    DEFAULT_LIMIT, MAX_LIMIT,
};
use super::ops::{intent_detail, required_note};
use super::{AdminContext, ApiError, Forbidden};
use crate::producer::{Enqueued, NewIntent};
use crate::store::{Cancellation, CommittedEnqueueError, Database, IntentFilter, NewAuditEntry};

/// Query of `GET /v1/intents`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct IntentQuery {
    tenant: Option<String>,
    state: Option<String>,
    action: Option<String>,
    older_than: Option<String>,
    after_id: Option<i64>,
    limit: Option<u32>,
}

/// `GET /v1/intents`: intents of the caller's tenants (narrowed by `tenant`), by id.
pub(crate) async fn list_intents(
    State(ctx): State<AdminContext>,
    caller: Caller,
    ApiQuery(q): ApiQuery<IntentQuery>,
) -> Result<Json<Value>, ApiError> {
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
    Ok(Json(
        json!({"intents": intents, "next_after_id": next_after_id}),
    ))
}

/// `GET /v1/intents/{id}`: the intent, its attempts and its reconciliation items.
pub(crate) async fn show_intent(
    State(ctx): State<AdminContext>,
    caller: Caller,
    IdPath(id): IdPath,
) -> Result<Json<Value>, ApiError> {
    let detail = intent_detail(&ctx, &caller, id).await?;
    Ok(Json(json!(detail)))
}

/// Body of `POST /v1/intents/{id}/cancel`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CancelBody {
    note: Option<String>,
}

/// `POST /v1/intents/{id}/cancel`: a pending intent becomes `cancelled` (audited).
pub(crate) async fn cancel_intent(
    State(ctx): State<AdminContext>,
    caller: Caller,
    IdPath(id): IdPath,
    ApiJson(body): ApiJson<CancelBody>,
) -> Result<Json<Value>, ApiError> {
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
    Ok(Json(json!({ "intent": intent })))
}

/// Body of `POST /v1/intents`: [`NewIntent`], with unknown fields refused (a misspelt
/// `idempotency_key` must not silently become a derived key).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EnqueueBody {
    tenant: String,
    operation_id: String,
    action: String,
    payload: Value,
    #[serde(default = "first_version")]
    payload_version: i32,
    idempotency_key: Option<String>,
    ordering_key: Option<String>,
    not_before: Option<DateTime<Utc>>,
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
        tenant: Some(intent.tenant.clone()),
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
