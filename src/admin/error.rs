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
use chrono::{DateTime, Utc};
use serde::Serialize;

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

/// The stable machine-readable code of an error body (`error.code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// A missing or malformed field (`400`; `field` names it).
    InvalidRequest,
    /// No or an unknown bearer token (`401`).
    Unauthenticated,
    /// A viewer asked for a change, or a tenant outside the token (`403`).
    Forbidden,
    /// No such id in the token's tenants (`404`).
    NotFound,
    /// The item was resolved first by someone else (`409`; with who, how and when).
    AlreadyResolved,
    /// The intent is not in a state that allows this (`409`; with its `state`).
    WrongState,
    /// The operation was already recorded with a different payload (`409`).
    Conflict,
    /// The database or another part the caller cannot fix failed (`500`).
    Internal,
}

impl ErrorCode {
    /// The code as it appears in the body.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::Unauthenticated => "unauthenticated",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::NotFound => "not_found",
            ErrorCode::AlreadyResolved => "already_resolved",
            ErrorCode::WrongState => "wrong_state",
            ErrorCode::Conflict => "conflict",
            ErrorCode::Internal => "internal",
        }
    }
}

/// The JSON body of every error response of the API.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// The `error` object of an [`ErrorBody`].
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[schema(
    description = "What went wrong: a stable code, a message, the request id, and the fields the code names."
)]
pub struct ErrorDetail {
    /// The stable code; branch on it, not on the message.
    pub code: ErrorCode,
    /// What went wrong, for people (for a `500`: where to look, with the request id).
    pub message: String,
    /// The request's id (as in the `x-request-id` header and the daemon's log lines).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// With `invalid_request`: the field that is missing or malformed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<&'static str>,
    /// With `wrong_state`: the intent's state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// With `already_resolved`: how the item was resolved.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = crate::store::schema::resolution)]
    pub resolution: Option<String>,
    /// With `already_resolved`: who resolved it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolved_by: Option<String>,
    /// With `already_resolved`: when.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolved_at: Option<DateTime<Utc>>,
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
    fn status_and_code(&self) -> (StatusCode, ErrorCode) {
        const NOT_FOUND: (StatusCode, ErrorCode) = (StatusCode::NOT_FOUND, ErrorCode::NotFound);
        const INVALID: (StatusCode, ErrorCode) =
            (StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest);
        const FAILED: (StatusCode, ErrorCode) =
            (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::Internal);
        match self {
            ApiError::Unauthenticated => (StatusCode::UNAUTHORIZED, ErrorCode::Unauthenticated),
            ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, ErrorCode::Forbidden),
            ApiError::NotFound | ApiError::Review(ReviewError::NotFound) => NOT_FOUND,
            ApiError::Invalid(_)
            | ApiError::Review(ReviewError::Invalid(_))
            | ApiError::Enqueue(EnqueueError::Invalid(_)) => INVALID,
            ApiError::Review(ReviewError::AlreadyResolved { .. }) => {
                (StatusCode::CONFLICT, ErrorCode::AlreadyResolved)
            }
            ApiError::Review(ReviewError::WrongState { .. }) => {
                (StatusCode::CONFLICT, ErrorCode::WrongState)
            }
            ApiError::Enqueue(EnqueueError::Conflict { .. }) => {
                (StatusCode::CONFLICT, ErrorCode::Conflict)
            }
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
        self.status_and_code().1.as_str()
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
    pub fn detail(&self) -> ErrorDetail {
        let mut error = ErrorDetail {
            code: self.status_and_code().1,
            message: self.message(),
            request_id: crate::api::request_id::current(),
            field: self.invalid_field().map(|f| f.field),
            state: None,
            resolution: None,
            resolved_by: None,
            resolved_at: None,
        };
        match self {
            ApiError::Review(ReviewError::AlreadyResolved {
                resolution,
                resolved_by,
                resolved_at,
            }) => {
                error.resolution = Some(resolution.clone());
                error.resolved_by = Some(resolved_by.clone());
                error.resolved_at = Some(*resolved_at);
            }
            ApiError::Review(ReviewError::WrongState { state, .. }) => {
                error.state = Some(state.clone())
            }
            _ => {}
        }
        error
    }

    /// The JSON body.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: self.detail(),
        }
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

/// The documented error responses, one per status, each with an [`ErrorBody`]
/// (`components.responses` of the OpenAPI document; see [`super::openapi`]).
pub(crate) mod responses {
    use super::ErrorBody;

    /// `invalid_request`: a missing or malformed field (`field` names it).
    #[derive(utoipa::ToResponse)]
    pub(crate) struct E400(#[allow(dead_code)] ErrorBody);

    /// `unauthenticated`: no or an unknown bearer token (with `WWW-Authenticate: Bearer`).
    #[derive(utoipa::ToResponse)]
    pub(crate) struct E401(#[allow(dead_code)] ErrorBody);

    /// `forbidden`: a viewer attempted a change, or a tenant outside the token.
    #[derive(utoipa::ToResponse)]
    pub(crate) struct E403(#[allow(dead_code)] ErrorBody);

    /// `not_found`: no such id in the token's tenants (an id of another tenant answers the
    /// same, so ids cannot be probed).
    #[derive(utoipa::ToResponse)]
    pub(crate) struct E404(#[allow(dead_code)] ErrorBody);

    /// `already_resolved` (with `resolution`, `resolved_by`, `resolved_at`), `wrong_state`
    /// (with `state`) or `conflict`.
    #[derive(utoipa::ToResponse)]
    pub(crate) struct E409(#[allow(dead_code)] ErrorBody);

    /// `internal`: the database failed; the message names the request id to look up in the
    /// log.
    #[derive(utoipa::ToResponse)]
    pub(crate) struct E500(#[allow(dead_code)] ErrorBody);
}
