//! The review page, grown into the operator console: server-rendered HTML under `/review` —
//! sign in with a token; the dashboard (`/review`, [`dashboard`]); the intents browser and
//! one intent with why it waits (`/review/intents`, [`intents`], [`why`]); bulk redispatch
//! and cancel with a dry run first ([`bulk`]); the reconciliation queue (`/review/queue`),
//! one item with its attempt history and the three resolutions; and the audit log with
//! filters. No JavaScript, no front-end build. Viewers read every page; only operators get
//! forms, and every POST checks the role again.
//!
//! The session is the `outboxd_session` cookie (`HttpOnly`, `SameSite=Strict`,
//! `Path=/review`, `Secure` when configured): `<expiry>.<HMAC of the token and the expiry
//! under a per-process key>`, never the token. Every request matches it against every
//! configured token, so revoking a token in the configuration ends its sessions, and a
//! session ends at its expiry whatever the browser keeps. State-changing forms carry a
//! `csrf` field (an HMAC of the token under the same key, see [`crate::admin`]). Failed
//! sign-ins are throttled per client (`throttle`). Mutations use POST and redirect after
//! success.

mod bulk;
mod chart;
mod dashboard;
mod filter;
mod handlers;
mod html;
mod intents;
mod pages;
mod plan;
mod throttle;
mod why;

pub(super) use throttle::SignInThrottle;

use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, COOKIE, REFERRER_POLICY, SET_COOKIE,
    X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use super::auth::{authenticate, Caller};
use super::AdminContext;

/// Name of the session cookie.
pub(crate) const COOKIE_NAME: &str = "outboxd_session";
/// How long a session cookie lives, in seconds (12 hours).
const SESSION_SECONDS: u32 = 12 * 3600;

/// The review page's routes.
pub(super) fn routes() -> Router<AdminContext> {
    Router::new()
        .route("/review", get(dashboard::dashboard))
        .route("/review/queue", get(handlers::queue))
        .route("/review/intents", get(intents::browse))
        .route("/review/intents/bulk", get(bulk::dry_run).post(bulk::apply))
        .route("/review/intents/{id}", get(intents::show))
        .route(
            "/review/login",
            get(handlers::login_form).post(handlers::login),
        )
        .route("/review/logout", post(handlers::logout))
        .route("/review/items/{id}", get(handlers::item))
        .route("/review/items/{id}/resolve", post(handlers::resolve_item))
        .route("/review/audit", get(handlers::audit))
}

/// A signed-in user and the CSRF value their forms must carry.
pub(super) struct Session {
    caller: Caller,
    csrf: String,
}

/// The signed-in user of a request, from the session cookie.
pub(super) fn session(ctx: &AdminContext, headers: &HeaderMap) -> Option<Session> {
    let encoded = headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE_NAME)
        .map(|(_, value)| value)?;
    let (expires, _) = encoded.split_once('.')?;
    let expires: i64 = expires.parse().ok()?;
    if expires <= chrono::Utc::now().timestamp() {
        return None;
    }
    // Every configured token is tried (no early exit), like `authenticate`.
    let mut found = None;
    for configured in ctx.tokens.iter() {
        let Some(token) = configured.token.as_ref().filter(|t| !t.is_empty()) else {
            continue;
        };
        let expected = session_value(ctx, token.expose(), expires);
        let same = expected.len() == encoded.len()
            && bool::from(expected.as_bytes().ct_eq(encoded.as_bytes()));
        if same && found.is_none() {
            found = Some(token.expose());
        }
    }
    let token = found?;
    let caller = authenticate(&ctx.tokens, token)?;
    Some(Session {
        caller,
        csrf: csrf_value(ctx, token),
    })
}

/// HMAC-SHA256 under the per-process review key of `label`, then each part NUL-separated.
fn review_mac(ctx: &AdminContext, label: &[u8], parts: &[&[u8]]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(ctx.review_key.as_slice())
        .expect("HMAC accepts any key length");
    mac.update(label);
    for part in parts {
        mac.update(b"\0");
        mac.update(part);
    }
    hex::encode(mac.finalize().into_bytes())
}

/// The session cookie's value for `token` until `expires` (Unix seconds).
fn session_value(ctx: &AdminContext, token: &str, expires: i64) -> String {
    let expires_text = expires.to_string();
    let mac = review_mac(
        ctx,
        b"outboxd.review.session.v1",
        &[expires_text.as_bytes(), token.as_bytes()],
    );
    format!("{expires_text}.{mac}")
}

/// The CSRF field for a session with `token`.
fn csrf_value(ctx: &AdminContext, token: &str) -> String {
    review_mac(ctx, b"outboxd.review.csrf.v1", &[token.as_bytes()])
}

impl Session {
    /// Whether a submitted form's `csrf` field belongs to this session (constant time).
    fn csrf_matches(&self, submitted: Option<&str>) -> bool {
        let submitted = submitted.unwrap_or_default();
        submitted.len() == self.csrf.len()
            && bool::from(submitted.as_bytes().ct_eq(self.csrf.as_bytes()))
    }
}

/// The `Set-Cookie` value that signs `token` in for [`SESSION_SECONDS`].
fn session_cookie(ctx: &AdminContext, token: &str) -> String {
    let expires = chrono::Utc::now().timestamp() + i64::from(SESSION_SECONDS);
    format!(
        "{COOKIE_NAME}={}; Path=/review; HttpOnly; SameSite=Strict; Max-Age={SESSION_SECONDS}{}",
        session_value(ctx, token, expires),
        secure_attribute(ctx)
    )
}

/// The `Set-Cookie` value that signs out.
fn expired_cookie(ctx: &AdminContext) -> String {
    format!(
        "{COOKIE_NAME}=; Path=/review; HttpOnly; SameSite=Strict; Max-Age=0{}",
        secure_attribute(ctx)
    )
}

fn secure_attribute(ctx: &AdminContext) -> &'static str {
    if ctx.cookie_secure {
        "; Secure"
    } else {
        ""
    }
}

/// Whether the browser says the request came from another site.
fn is_cross_site(headers: &HeaderMap) -> bool {
    headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("cross-site"))
}

/// An HTML response with the page's security headers (no caching, no framing, no
/// scripts, forms only to this origin).
fn page(status: StatusCode, html: String) -> Response {
    let mut response = (status, Html(html)).into_response();
    let headers = response.headers_mut();
    let fixed = [
        (CACHE_CONTROL, "no-store"),
        (X_FRAME_OPTIONS, "DENY"),
        (X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (REFERRER_POLICY, "no-referrer"),
        (
            CONTENT_SECURITY_POLICY,
            "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; \
             form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    ];
    for (name, value) in fixed {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// A `303 See Other` to `location`, optionally setting a cookie.
fn redirect(location: &str, cookie: Option<String>) -> Response {
    let mut response = StatusCode::SEE_OTHER.into_response();
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(location) {
        headers.insert(axum::http::header::LOCATION, value);
    }
    if let Some(value) = cookie.and_then(|c| HeaderValue::from_str(&c).ok()) {
        headers.insert(SET_COOKIE, value);
    }
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
