//! A request id on every admin response: `x-request-id` is taken from the request when it
//! is a sane token (1–128 visible ASCII characters) or generated (32 hex digits), put
//! back on the request for the handlers, returned on the response, and kept for the
//! duration of the request so that error bodies ([`crate::admin::ApiError`]) and every
//! line logged meanwhile (the `request` span's `request_id`) carry it.
//!
//! [`layer`] may wrap a router that is merged into another one wrapped again: the inner
//! layer sees the id the outer one set and neither opens a second span.

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

/// The header carrying the id, both ways.
pub static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Longest id accepted from a client.
pub const MAX_LEN: usize = 128;

tokio::task_local! {
    static REQUEST_ID: String;
}

/// The id of the request being served on this task, if any.
pub fn current() -> Option<String> {
    REQUEST_ID.try_with(Clone::clone).ok()
}

/// Adds [`middleware`] to every route of `router`.
pub fn layer<S: Clone + Send + Sync + 'static>(router: axum::Router<S>) -> axum::Router<S> {
    router.layer(axum::middleware::from_fn(middleware))
}

/// The middleware: propagate or generate the id, serve the request inside its scope and
/// span, and return the id on the response.
pub async fn middleware(mut request: Request, next: Next) -> Response {
    if current().is_some() {
        return next.run(request).await;
    }
    let id = request
        .headers()
        .get(&X_REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| acceptable(v))
        .map(str::to_owned)
        .unwrap_or_else(generate);
    let value = HeaderValue::from_str(&id).expect("checked or generated as visible ASCII");
    request
        .headers_mut()
        .insert(X_REQUEST_ID.clone(), value.clone());
    let span = tracing::info_span!(
        "request",
        request_id = %id,
        method = %request.method(),
        path = %request.uri().path()
    );
    let mut response = REQUEST_ID
        .scope(id, next.run(request).instrument(span))
        .await;
    response.headers_mut().insert(X_REQUEST_ID.clone(), value);
    response
}

/// Whether a client's id is used as is.
fn acceptable(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_LEN && id.bytes().all(|b| b.is_ascii_graphic())
}

/// A new random id: 128 bits as 32 hex digits.
fn generate() -> String {
    format!("{:032x}", rand::random::<u128>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_ids_are_checked() {
        assert!(acceptable("req-42"));
        assert!(!acceptable(""));
        assert!(!acceptable("two words"));
        assert!(!acceptable(&"x".repeat(MAX_LEN + 1)));
        let id = generate();
        assert_eq!(id.len(), 32);
        assert!(acceptable(&id));
    }
}
