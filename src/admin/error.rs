//! [`ApiError`]: every way an admin request can fail, and the one place where each maps to
//! an HTTP status and a stable error code ([`ApiError::status`], [`ApiError::code`], one
//! match). The store's refusals ([`ReviewError`]) and the producer's ([`EnqueueError`])
//! are wrapped as they are, so their fields are declared once, where they are decided. The
//! JSON API renders the error as `{"error": {"code", "message", ...}}`; the review page
//! renders the same status and message as HTML. A failure of the database (or of any
//! other part the caller cannot fix) is a 500 whose cause is logged, never shown.

use std::error::Error;

use axum::http::header::WWW_AUTHENTICATE;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::intent::InvalidField;
use crate::producer::EnqueueError;
use crate::store::{ReviewError, StoreError};

#[cfg(test)]
mod tests;

/// What a caller is told about a failure that is not theirs to fix.
const INTERNAL: &str = "internal error";

/// Why an admin request was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// No token, a malformed `Authorization` header, or a token that matches none (401).
    #[error("a valid bearer token is required")]
    Unauthenticated,
    /// The token may not do this (403).
    #[error(transparent)]
    Forbidden(#[from] Forbidden),
    /// Nothing with this id inside the caller's tenants (404); also for ids that exist in
    /// another tenant, so existence is never revealed.
    #[error("not found")]
    NotFound,
    /// A field of the request is missing or malformed (400); the error names it.
    #[error(transparent)]
    Invalid(InvalidField),
    /// The store refused the change or found nothing (404, 400, 409), or the database
    /// failed (500).
    #[error("{}", review_text(.0))]
    Review(#[from] ReviewError),
    /// Recording an intent was refused (400, 409) or failed (500).
    #[error("{}", enqueue_text(.0))]
    Enqueue(#[from] EnqueueError),
    /// The database failed (500); details are logged, not returned.
    #[error("{INTERNAL}")]
    Store(#[from] StoreError),
}

/// Why a caller with a valid session or token may not do this (403).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Forbidden {
    /// A viewer token or session asked for a change.
    #[error("this token has the viewer role; changes need an operator token")]
    ViewerRole,
    /// A request body names a tenant outside the token's tenants.
    #[error("this token may not record intents for that tenant")]
    TenantOutsideScope,
    /// The review page's resolution form came without this session's CSRF token.
    #[error(
        "This form has expired or did not come from this page. Reload the item and try again."
    )]
    StaleResolveForm,
    /// The review page's bulk change form came without this session's CSRF token.
    #[error("This form has expired or did not come from this page. Run the dry run again.")]
    StaleBulkForm,
}

/// The message of a store error: its own words for a refusal, [`INTERNAL`] for a failure.
fn review_text(e: &ReviewError) -> String {
    match e {
        ReviewError::Store(_) => INTERNAL.to_owned(),
        refusal => refusal.to_string(),
    }
}

/// The message of an enqueue error (the caller knows its tenant; the message does not
/// repeat it).
fn enqueue_text(e: &EnqueueError) -> String {
    match e {
        EnqueueError::Conflict { operation_id, .. } => {
            format!("operation {operation_id:?} was already recorded with a different payload")
        }
        EnqueueError::Invalid(field) => field.to_string(),
        EnqueueError::Database(_) | EnqueueError::KeySecret(_) => INTERNAL.to_owned(),
    }
}

impl ApiError {
    /// A 400 naming `field`.
    pub fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        ApiError::Invalid(InvalidField::new(field, reason))
    }

    /// The HTTP status and the stable machine-readable code, decided together for every
    /// variant, the wrapped ones by their own variant.
    fn status_and_code(&self) -> (StatusCode, &'static str) {
        const NOT_FOUND: (StatusCode, &str) = (StatusCode::NOT_FOUND, "not_found");
        const INVALID: (StatusCode, &str) = (StatusCode::BAD_REQUEST, "invalid_request");
        const FAILED: (StatusCode, &str) = (StatusCode::INTERNAL_SERVER_ERROR, "internal");
        match self {
            ApiError::Unauthenticated => (StatusCode::UNAUTHORIZED, "unauthenticated"),
            ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            ApiError::NotFound | ApiError::Review(ReviewError::NotFound) => NOT_FOUND,
            ApiError::Invalid(_)
            | ApiError::Review(ReviewError::Invalid(_))
            | ApiError::Enqueue(EnqueueError::Invalid(_)) => INVALID,
            ApiError::Review(ReviewError::AlreadyResolved { .. }) => {
                (StatusCode::CONFLICT, "already_resolved")
            }
            ApiError::Review(ReviewError::WrongState { .. }) => {
                (StatusCode::CONFLICT, "wrong_state")
            }
            ApiError::Enqueue(EnqueueError::Conflict { .. }) => (StatusCode::CONFLICT, "conflict"),
            ApiError::Store(_)
            | ApiError::Review(ReviewError::Store(_))
            | ApiError::Enqueue(EnqueueError::Database(_) | EnqueueError::KeySecret(_)) => FAILED,
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status_and_code().0
    }

    /// The stable machine-readable code.
    pub fn code(&self) -> &'static str {
        self.status_and_code().1
    }

    /// The failure behind a 500, to log with its causes (never shown to the caller).
    pub fn internal(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            ApiError::Store(e) | ApiError::Review(ReviewError::Store(e)) => Some(e),
            ApiError::Enqueue(e @ (EnqueueError::Database(_) | EnqueueError::KeySecret(_))) => {
                Some(e)
            }
            _ => None,
        }
    }

    /// The field a 400 names, whichever layer refused it.
    pub fn invalid_field(&self) -> Option<&InvalidField> {
        match self {
            ApiError::Invalid(field)
            | ApiError::Review(ReviewError::Invalid(field))
            | ApiError::Enqueue(EnqueueError::Invalid(field)) => Some(field),
            _ => None,
        }
    }

    /// The message for the caller: for a 500, where to look and the request id.
    pub fn message(&self) -> String {
        if self.internal().is_none() {
            return self.to_string();
        }
        match crate::api::request_id::current() {
            Some(id) => format!("{INTERNAL}; details in the log, request id {id}"),
            None => format!("{INTERNAL}; details in the log"),
        }
    }

    /// The `error` object of the JSON body, with the request id when serving a request.
    pub fn body(&self) -> Value {
        let mut error = json!({"code": self.code(), "message": self.message()});
        if let Some(id) = crate::api::request_id::current() {
            error["request_id"] = json!(id);
        }
        if let Some(field) = self.invalid_field() {
            error["field"] = json!(field.field);
        }
        match self {
            ApiError::Review(ReviewError::AlreadyResolved {
                resolution,
                resolved_by,
                resolved_at,
            }) => {
                error["resolution"] = json!(resolution);
                error["resolved_by"] = json!(resolved_by);
                error["resolved_at"] = json!(resolved_at);
            }
            ApiError::Review(ReviewError::WrongState { state, .. }) => {
                error["state"] = json!(state)
            }
            _ => {}
        }
        json!({ "error": error })
    }

    /// Logs server-side failures (with their cause) once, where they become responses.
    pub(crate) fn log(&self) {
        if let Some(e) = self.internal() {
            // Inside the `request` span, which carries the request id.
            tracing::error!(error = %e, "admin request failed");
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.log();
        let mut response = (self.status(), Json(self.body())).into_response();
        if matches!(self, ApiError::Unauthenticated) {
            response
                .headers_mut()
                .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        ApiError::Store(StoreError::Database(e))
    }
}
