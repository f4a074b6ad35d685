//! The review page: server-rendered HTML for operators under `/review` — sign in with a
//! token, the reconciliation queue, one item with its attempt history and the three
//! resolutions, and the audit log. No JavaScript, no front-end build.
//!
//! The session is the token itself in the `outboxd_token` cookie (`HttpOnly`,
//! `SameSite=Strict`, `Path=/review`, base64url-encoded); every request re-authenticates it
//! exactly like a bearer token, so revoking a token in the configuration ends its sessions.
//! State-changing forms carry a `csrf` field (HMAC of the token under a per-process key,
//! see [`crate::admin`]). Mutations use POST and redirect after success.

mod handlers;
mod html;
mod pages;

use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, COOKIE, REFERRER_POLICY, SET_COOKIE,
    X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use super::auth::{authenticate, Caller};
use super::AdminContext;

/// Name of the session cookie.
pub(crate) const COOKIE_NAME: &str = "outboxd_token";
/// How long a session cookie lives, in seconds (12 hours).
const SESSION_SECONDS: u32 = 12 * 3600;

/// The review page's routes.
pub(super) fn routes() -> Router<AdminContext> {
    Router::new()
        .route("/review", get(handlers::queue))
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
    let token = String::from_utf8(URL_SAFE_NO_PAD.decode(encoded).ok()?).ok()?;
    let caller = authenticate(&ctx.tokens, &token)?;
    Some(Session {
        caller,
        csrf: csrf_value(ctx, &token),
    })
}

/// The CSRF field for a session with `token`.
fn csrf_value(ctx: &AdminContext, token: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(ctx.csrf_key.as_slice())
        .expect("HMAC accepts any key length");
    mac.update(b"outboxd.review.csrf.v1\0");
    mac.update(token.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

impl Session {
    /// Whether a submitted form's `csrf` field belongs to this session (constant time).
    fn csrf_matches(&self, submitted: Option<&str>) -> bool {
        let submitted = submitted.unwrap_or_default();
        submitted.len() == self.csrf.len()
            && bool::from(submitted.as_bytes().ct_eq(self.csrf.as_bytes()))
    }
}

/// The `Set-Cookie` value that signs `token` in.
fn session_cookie(token: &str) -> String {
    format!(
        "{COOKIE_NAME}={}; Path=/review; HttpOnly; SameSite=Strict; Max-Age={SESSION_SECONDS}",
        URL_SAFE_NO_PAD.encode(token.as_bytes())
    )
}

/// The `Set-Cookie` value that signs out.
fn expired_cookie() -> String {
    format!("{COOKIE_NAME}=; Path=/review; HttpOnly; SameSite=Strict; Max-Age=0")
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
