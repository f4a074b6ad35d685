//! The admin surface for people: a JSON API under `/v1/` and a server-rendered review page
//! under `/review`, both built by [`router`] on an [`AdminContext`].
//!
//! What lives here: authentication and tenant scoping of every request, the HTTP handlers,
//! the one mapping of errors to HTTP responses ([`ApiError`]), the HTML of the review
//! page, and the API's OpenAPI document, generated from the handlers and their types
//! ([`openapi`], `GET /v1/openapi.json`). What does
//! not: SQL (every statement is in [`crate::store`]), the health, readiness and metrics
//! endpoints, and the listener that serves this router inside `outboxd run`.
//!
//! Every response carries `x-request-id` ([`crate::api::request_id`]), which error bodies
//! repeat as `error.request_id`.
//! The full reference with examples is `docs/admin-api.md`.
//!
//! ## Authentication and scope
//!
//! * The API takes `Authorization: Bearer <token>` and nothing else (no cookie), so a
//!   browser cannot be tricked into sending API requests with an operator's credentials.
//!   Tokens come from `[[admin.tokens]]`; a presented token is compared with every
//!   configured one in constant time (see [`auth`]). Tokens are never logged or echoed.
//! * Each token has a role: `viewer` reads, `operator` also mutates. A viewer attempting a
//!   mutation gets `403` before anything is looked up.
//! * Each token has a set of tenants (or `*`). Every read and write is scoped to them
//!   *before* the lookup (rule 12): something outside the scope answers `404`, exactly like
//!   something that does not exist, so ids cannot be probed. `POST /v1/intents` for a
//!   tenant outside the token's scope answers `403 tenant_forbidden` without touching the
//!   database, so a replay is never answered for a tenant the token cannot access.
//!
//! ## `POST /v1/intents` is not transactional with the producer
//!
//! Producers that can write to the outbox database should call [`crate::enqueue`] inside
//! their own transaction. The HTTP route is for producers that cannot: the intent commits
//! in outboxd's own transaction, so it is **not** atomic with the producer's business
//! write. Such a producer must retry the POST with the same `operation_id` until it gets a
//! receipt; replays are answered (`200`, `replayed: true`) and a changed payload is a
//! `409`, exactly as in the library.
//!
//! ## The review page and CSRF
//!
//! `POST /review/login` sets an `HttpOnly; SameSite=Strict` session cookie scoped to
//! `/review` (and `Secure` with `[admin] cookie_secure = true`). The cookie never holds the
//! token: it holds an expiry and an HMAC-SHA256 of the token and that expiry under a random
//! key made when the [`AdminContext`] is built, so a leaked cookie is no API credential,
//! ends at its expiry and with the process. SameSite=Strict keeps the cookie off cross-site
//! requests in current browsers; as a second, browser-independent layer every
//! state-changing form carries a hidden `csrf` field: an HMAC of the session's token under
//! the same key (domain-separated). The key never leaves the process, so another site
//! cannot compute the field and the field says nothing about the token; a restart
//! invalidates open forms and sessions (the page asks to sign in again). `POST
//! /review/login` also refuses requests a browser marks `Sec-Fetch-Site: cross-site`
//! (login CSRF), and after repeated failures from one client answers `429` for a while.

pub mod auth;
mod bulk;
mod error;
mod extract;
mod intents;
pub mod openapi;
mod ops;
mod providers;
mod reconciliation;
mod review;

use std::sync::Arc;

use axum::Router;
use tokio::sync::Notify;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use error::{ApiError, ErrorBody, ErrorCode, ErrorDetail, Forbidden};

use crate::action::resend::ResendPolicies;
use crate::action::RetrySafety;
use crate::config::AdminToken;
use crate::store::{Database, OperatorStore, ResendApproval};

/// Everything the admin handlers need; cheap to clone (every field is shared).
#[derive(Clone)]
pub struct AdminContext {
    /// The store every read and write goes through.
    pub store: Arc<dyn OperatorStore>,
    /// The database, for `POST /v1/intents` (which opens its own transaction).
    pub db: Database,
    /// The configured tokens with their resolved secrets; entries without a value are
    /// ignored.
    pub tokens: Arc<[AdminToken]>,
    /// Poked after a redispatch or an enqueue so the local dispatcher looks for work now.
    pub wake_dispatcher: Arc<Notify>,
    /// The per-process key of the review page's session cookie and CSRF field.
    review_key: Arc<[u8; 32]>,
    /// Whether the session cookie is marked `Secure`.
    cookie_secure: bool,
    /// Failed review-page sign-ins per client.
    sign_ins: Arc<review::SignInThrottle>,
    /// The daemon's configured actions and what the resend rule needs of each (None: not
    /// told, so the console cannot say whether an action is configured, and the resend
    /// rule treats each as `not_idempotent`).
    actions: Option<Arc<ResendPolicies>>,
}

impl AdminContext {
    /// A context on `db` (its [`Database::store`]) accepting `tokens`, poking
    /// `wake_dispatcher` when there is new work.
    pub fn new(db: Database, tokens: Vec<AdminToken>, wake_dispatcher: Arc<Notify>) -> Self {
        Self {
            store: db.operator_store(),
            db,
            tokens: tokens.into(),
            wake_dispatcher,
            review_key: Arc::new(rand::random()),
            cookie_secure: false,
            sign_ins: Arc::default(),
            actions: None,
        }
    }

    /// Tells the console which actions the daemon has configured, with what the resend
    /// rule needs of each ([`crate::dispatch::ActionTable::resend_policies`]).
    pub fn with_actions(mut self, actions: ResendPolicies) -> Self {
        self.actions = Some(Arc::new(actions));
        self
    }

    /// The retry safety of `action`: `Some(None)` when it is not configured, `None` when
    /// the console was not told the configuration.
    pub(crate) fn action_safety(&self, action: &str) -> Option<Option<RetrySafety>> {
        self.actions
            .as_ref()
            .map(|a| a.get(action).map(|p| p.retry_safety))
    }

    /// The configured actions' resend policies (empty when the console was not told).
    pub(crate) fn resend_policies(&self) -> Arc<ResendPolicies> {
        self.actions.clone().unwrap_or_default()
    }

    /// What a person's redispatch through this context brings for the resend rule.
    pub(crate) fn resend_approval(&self, confirmed_may_act_twice: bool) -> ResendApproval {
        ResendApproval {
            policies: self.resend_policies(),
            confirmed_may_act_twice,
        }
    }

    /// Marks the review page's session cookie `Secure` (`[admin] cookie_secure`).
    pub fn with_cookie_secure(mut self, secure: bool) -> Self {
        self.cookie_secure = secure;
        self
    }
}

impl std::fmt::Debug for AdminContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminContext")
            .field("backend", &self.store.backend())
            .field("tokens", &self.tokens.len())
            .finish_non_exhaustive()
    }
}

/// The `/v1` routes, each registered with its OpenAPI operation: utoipa-axum's `routes!`
/// takes the method and path from the handler's `#[utoipa::path]`, so a route cannot be
/// added here without its documentation ([`openapi`]).
pub(crate) fn v1_routes() -> OpenApiRouter<AdminContext> {
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(intents::list_intents, intents::create_intent))
        .routes(routes!(intents::show_intent))
        .routes(routes!(intents::cancel_intent))
        .routes(routes!(reconciliation::list_reconciliation))
        .routes(routes!(bulk::bulk_redispatch))
        .routes(routes!(reconciliation::show_reconciliation))
        .routes(routes!(reconciliation::resolve_item))
        .routes(routes!(reconciliation::list_audit))
        .routes(routes!(providers::list_providers))
        .routes(routes!(openapi::serve))
}

/// The admin API (`/v1/...`) and the review page (`/review...`) on `ctx`.
pub fn router(ctx: AdminContext) -> Router {
    let (v1, _) = v1_routes().split_for_parts();
    let routes = v1.merge(review::routes()).with_state(ctx);
    crate::api::request_id::layer(routes)
}
