//! The review page's handlers: sign in and out, the queue, one item, the resolution form
//! (POST, checked for CSRF, then redirect), and the audit log. Reads and the resolution go
//! through the same scoped operations as the JSON API.

use std::net::SocketAddr;

use axum::extract::rejection::FormRejection;
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use axum::{Extension, Form};
use chrono::Utc;
use maud::Markup;
use serde::Deserialize;

use super::html::notice;
use super::pages::{self, FormState};
use super::{expired_cookie, is_cross_site, page, redirect, session, session_cookie, Session};
use crate::admin::auth::authenticate;
use crate::admin::extract::IdPath;
use crate::admin::ops::{item_detail, required_note, resolution_kind, resolve, ResolveRequest};
use crate::admin::{AdminContext, ApiError, Forbidden};
use crate::store::{
    resend_risk_of, AuditFilter, ReconciliationFilter, ReconciliationItemId, ReviewError,
};

/// Items per queue page.
const QUEUE_PAGE: u32 = 100;
/// Entries per audit page.
const AUDIT_PAGE: u32 = 100;

/// Renders `error` as an HTML page with its status.
pub(super) fn error_page(who: Option<&Session>, error: &ApiError) -> Response {
    error.log();
    let message = match error {
        _ if error.internal().is_some() => match crate::api::request_id::current() {
            Some(id) => {
                format!("Internal error; the daemon's log has the details under request id {id}.")
            }
            None => "Internal error; the daemon's log has the details.".to_owned(),
        },
        ApiError::NotFound | ApiError::Review(ReviewError::NotFound) => {
            "No such item (or not one your token may see).".to_owned()
        }
        other => other.to_string(),
    };
    page(
        error.status(),
        pages::error(who.map(|s| &s.caller), &message),
    )
}

/// Query of the queue page.
#[derive(Debug, Deserialize)]
pub(super) struct QueueParams {
    after_id: Option<String>,
    resolved: Option<String>,
}

/// `GET /review/queue`: the reconciliation queue (signed out: back to the sign-in form).
pub(super) async fn queue(
    State(ctx): State<AdminContext>,
    headers: HeaderMap,
    Query(q): Query<QueueParams>,
) -> Response {
    let Some(s) = session(&ctx, &headers) else {
        return redirect("/review", None);
    };
    let mut filter = ReconciliationFilter::open(s.caller.scope.clone(), QUEUE_PAGE);
    filter.after_id = q.after_id.and_then(|v| v.parse().ok());
    let items = match ctx.store.list_reconciliation(&filter).await {
        Ok(items) => items,
        Err(e) => return error_page(Some(&s), &e.into()),
    };
    let flash = match q
        .resolved
        .and_then(|v| v.parse::<ReconciliationItemId>().ok())
    {
        Some(id) => resolved_flash(&ctx, &s, id).await,
        None => None,
    };
    let next = (items.len() == QUEUE_PAGE as usize)
        .then(|| items.last().map(|i| i.id))
        .flatten();
    let html = pages::queue(&s.caller, &items, Utc::now(), flash, next);
    page(StatusCode::OK, html)
}

/// The notice of the item a resolution redirected from (read back, in scope).
async fn resolved_flash(
    ctx: &AdminContext,
    s: &Session,
    id: ReconciliationItemId,
) -> Option<Markup> {
    let item = ctx
        .store
        .get_reconciliation(id, &s.caller.scope)
        .await
        .ok()??;
    pages::resolved_notice(&item)
}

/// `GET /review/login`: the sign-in form.
pub(super) async fn login_form() -> Response {
    page(StatusCode::OK, pages::login(None))
}

/// Form of `POST /review/login`.
#[derive(Debug, Deserialize)]
pub(super) struct LoginForm {
    token: Option<String>,
}

/// `POST /review/login`: a valid token sets the session cookie and redirects to the queue;
/// a client with too many recent failures gets `429` whatever it sends.
pub(super) async fn login(
    State(ctx): State<AdminContext>,
    client: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    form: Result<Form<LoginForm>, FormRejection>,
) -> Response {
    if is_cross_site(&headers) {
        return page(
            StatusCode::FORBIDDEN,
            pages::login(Some("Sign-in requests from other sites are refused.")),
        );
    }
    let client = client.map(|Extension(ConnectInfo(addr))| addr.ip());
    let now = std::time::Instant::now();
    if let Err(wait) = ctx.sign_ins.check(client, now) {
        tracing::warn!(client = ?client, "review page sign-in throttled after repeated failures");
        return too_many_failures(wait);
    }
    let token = form.ok().and_then(|Form(f)| f.token).unwrap_or_default();
    let token = token.trim();
    match authenticate(&ctx.tokens, token) {
        Some(caller) => {
            tracing::info!(who = %caller.name, "review page sign-in");
            redirect("/review", Some(session_cookie(&ctx, token)))
        }
        None => {
            ctx.sign_ins.record_failure(client, now);
            tracing::warn!(client = ?client, "review page sign-in with an invalid token");
            page(
                StatusCode::UNAUTHORIZED,
                pages::login(Some("That token is not valid.")),
            )
        }
    }
}

/// The `429` answer of a throttled sign-in, saying when to try again.
fn too_many_failures(wait: std::time::Duration) -> Response {
    let minutes = wait.as_secs().div_ceil(60).max(1);
    let message =
        format!("Too many failed sign-ins from this address. Try again in {minutes} minute(s).");
    let mut response = page(
        StatusCode::TOO_MANY_REQUESTS,
        pages::login(Some(message.as_str())),
    );
    response
        .headers_mut()
        .insert("retry-after", HeaderValue::from(wait.as_secs().max(1)));
    response
}

/// `POST /review/logout`: clears the cookie (no CSRF check: signing out is harmless).
pub(super) async fn logout(State(ctx): State<AdminContext>) -> Response {
    redirect("/review", Some(expired_cookie(&ctx)))
}

/// Query of the item page.
#[derive(Debug, Deserialize)]
pub(super) struct ItemParams {
    notice: Option<String>,
}

/// `GET /review/items/{id}`: one item with its intent, attempts and the resolution form.
pub(super) async fn item(
    State(ctx): State<AdminContext>,
    headers: HeaderMap,
    IdPath(id): IdPath<ReconciliationItemId>,
    Query(q): Query<ItemParams>,
) -> Response {
    let Some(s) = session(&ctx, &headers) else {
        return redirect("/review", None);
    };
    let flash = match q.notice.as_deref() {
        Some("already_resolved") => Some(
            "Someone else resolved this item first; their resolution is shown below. \
             Nothing was changed by your submission.",
        ),
        _ => None,
    }
    .map(|m| notice("warn", m));
    render_item(&ctx, &s, id, flash, &FormState::default(), StatusCode::OK).await
}

async fn render_item(
    ctx: &AdminContext,
    s: &Session,
    id: ReconciliationItemId,
    flash: Option<Markup>,
    form: &FormState,
    status: StatusCode,
) -> Response {
    match item_detail(ctx, &s.caller, id).await {
        Ok(detail) => {
            let now = Utc::now();
            let form = FormState {
                may_act_twice: resend_risk_of(&ctx.resend_policies(), &detail.intent, now)
                    .map(|r| r.explain()),
                ..form.clone()
            };
            let html = pages::item(&detail, &s.caller, &s.csrf, now, flash, &form);
            page(status, html)
        }
        Err(e) => error_page(Some(s), &e),
    }
}

/// Form of `POST /review/items/{id}/resolve`.
#[derive(Debug, Default, Deserialize)]
pub(super) struct ResolveForm {
    csrf: Option<String>,
    resolution: Option<String>,
    provider_ref: Option<String>,
    note: Option<String>,
    confirm_may_act_twice: Option<String>,
}

/// `POST /review/items/{id}/resolve`: checks the session and the CSRF field, resolves
/// through the same store call as the API, and redirects: to the queue on success, back
/// to the item with a notice when someone else resolved it first.
pub(super) async fn resolve_item(
    State(ctx): State<AdminContext>,
    headers: HeaderMap,
    IdPath(id): IdPath<ReconciliationItemId>,
    form: Result<Form<ResolveForm>, FormRejection>,
) -> Response {
    let Some(s) = session(&ctx, &headers) else {
        return page(
            StatusCode::UNAUTHORIZED,
            pages::login(Some("Your session has ended; sign in again.")),
        );
    };
    let form = form.map(|Form(f)| f).unwrap_or_default();
    if !s.csrf_matches(form.csrf.as_deref()) {
        return error_page(Some(&s), &Forbidden::StaleResolveForm.into());
    }
    let checked = s
        .caller
        .require_operator()
        .and_then(|()| {
            resolution_kind(
                form.resolution.as_deref().unwrap_or_default(),
                form.provider_ref.as_deref(),
            )
        })
        .and_then(|kind| Ok((kind, required_note(form.note.as_deref())?)));
    let confirmed = form.confirm_may_act_twice.as_deref() == Some("yes");
    let outcome = match checked {
        Ok((kind, note)) => {
            let request = ResolveRequest::new(kind, note, confirmed);
            resolve(&ctx, &s.caller, id, request).await
        }
        Err(e) => Err(e),
    };
    match outcome {
        Ok(_) => redirect(&format!("/review/queue?resolved={id}"), None),
        Err(ApiError::Review(ReviewError::AlreadyResolved { .. })) => {
            redirect(&format!("/review/items/{id}?notice=already_resolved"), None)
        }
        Err(
            e @ (ApiError::Invalid(_)
            | ApiError::Review(ReviewError::Invalid(_) | ReviewError::WrongState { .. })),
        ) => {
            let flash = notice("err", e.to_string());
            let typed = FormState {
                resolution: form.resolution,
                provider_ref: form.provider_ref,
                note: form.note,
                may_act_twice: None,
            };
            render_item(&ctx, &s, id, Some(flash), &typed, e.status()).await
        }
        Err(e) => error_page(Some(&s), &e),
    }
}

/// Query of the audit page.
#[derive(Debug, Deserialize)]
pub(super) struct AuditParams {
    before_id: Option<String>,
    actor: Option<String>,
    action: Option<String>,
    intent: Option<String>,
}

/// `GET /review/audit`: the audit log of the signed-in user's tenants, newest first,
/// optionally only one actor's, one action's or one intent's entries.
pub(super) async fn audit(
    State(ctx): State<AdminContext>,
    headers: HeaderMap,
    Query(q): Query<AuditParams>,
) -> Response {
    let Some(s) = session(&ctx, &headers) else {
        return redirect("/review", None);
    };
    let trimmed = |v: Option<String>| v.map(|v| v.trim().to_owned()).unwrap_or_default();
    let form = pages::AuditForm {
        actor: trimmed(q.actor),
        action: trimmed(q.action),
        intent: trimmed(q.intent),
    };
    let intent_id = match form.intent.trim_start_matches('#') {
        "" => None,
        v => match v.parse() {
            Ok(id) => Some(id),
            Err(_) => {
                let e = ApiError::invalid("intent", "must be an intent number");
                return error_page(Some(&s), &e);
            }
        },
    };
    let non_empty = |v: &str| (!v.is_empty()).then(|| v.to_owned());
    let filter = AuditFilter {
        scope: s.caller.scope.clone(),
        actor: non_empty(&form.actor),
        action: non_empty(&form.action),
        intent_id,
        before_id: q.before_id.and_then(|v| v.parse().ok()),
        limit: AUDIT_PAGE,
    };
    match ctx.store.search_audit(&filter).await {
        Ok(entries) => {
            let next = (entries.len() == AUDIT_PAGE as usize)
                .then(|| entries.last().map(|e| e.id))
                .flatten();
            page(
                StatusCode::OK,
                pages::audit(&s.caller, &entries, next, &form),
            )
        }
        Err(e) => error_page(Some(&s), &e.into()),
    }
}
