//! [`ApiError`]: every way an admin request can fail, and the one place where each maps to
//! an HTTP status and a stable error code. The JSON API renders it as
//! `{"error": {"code", "message", ...}}`; the review page renders the same status and
//! message as HTML.

use axum::http::header::WWW_AUTHENTICATE;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::producer::EnqueueError;
use crate::store::{ReviewError, StoreError};

/// Why an admin request was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// No token, a malformed `Authorization` header, or a token that matches none (401).
    #[error("a valid bearer token is required")]
    Unauthenticated,
    /// The token may not do this: a viewer attempting a change, or a tenant outside the
    /// token's scope in a request body (403).
    #[error("{0}")]
    Forbidden(String),
    /// Nothing with this id inside the caller's tenants (404); also for ids that exist in
    /// another tenant, so existence is never revealed.
    #[error("not found")]
    NotFound,
    /// A field is missing or malformed (400); `field` names it when known.
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// The offending field (`note`, `tenant`, `older_than`, `body`, ...).
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Someone resolved the reconciliation item first (409).
    #[error("already resolved as {resolution} by {resolved_by} at {resolved_at}")]
    AlreadyResolved {
        /// Their resolution.
        resolution: String,
        /// Who.
        resolved_by: String,
        /// When.
        resolved_at: DateTime<Utc>,
    },
    /// The intent is not in a state the change applies to (409).
    #[error("intent is {state}; {what}")]
    WrongState {
        /// The intent's current state.
        state: String,
        /// What the change expects.
        what: &'static str,
    },
    /// The operation id is already recorded with a different payload (409).
    #[error("operation {operation_id:?} was already recorded with a different payload")]
    Conflict {
        /// The operation id.
        operation_id: String,
    },
    /// The database failed (500); details are logged, not returned.
    #[error("internal error")]
    Store(#[from] StoreError),
}

impl ApiError {
    /// A 400 naming `field`.
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        ApiError::Invalid {
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Unauthenticated => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound => StatusCode::NOT_FOUND,
            ApiError::Invalid { .. } => StatusCode::BAD_REQUEST,
            ApiError::AlreadyResolved { .. }
            | ApiError::WrongState { .. }
            | ApiError::Conflict { .. } => StatusCode::CONFLICT,
            ApiError::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::Unauthenticated => "unauthenticated",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::NotFound => "not_found",
            ApiError::Invalid { .. } => "invalid_request",
            ApiError::AlreadyResolved { .. } => "already_resolved",
            ApiError::WrongState { .. } => "wrong_state",
            ApiError::Conflict { .. } => "conflict",
            ApiError::Store(_) => "internal",
        }
    }

    /// The message of the JSON body: for a 500, where to look and the request id.
    pub fn message(&self) -> String {
        match (self, crate::api::request_id::current()) {
            (ApiError::Store(_), Some(id)) => {
                format!("internal error; details in the log, request id {id}")
            }
            (ApiError::Store(_), None) => "internal error; details in the log".to_owned(),
            _ => self.to_string(),
        }
    }

    /// The `error` object of the JSON body, with the request id when serving a request.
    pub fn body(&self) -> Value {
        let mut error = json!({"code": self.code(), "message": self.message()});
        if let Some(id) = crate::api::request_id::current() {
            error["request_id"] = json!(id);
        }
        match self {
            ApiError::Invalid { field, .. } => error["field"] = json!(field),
            ApiError::AlreadyResolved {
                resolution,
                resolved_by,
                resolved_at,
            } => {
                error["resolution"] = json!(resolution);
                error["resolved_by"] = json!(resolved_by);
                error["resolved_at"] = json!(resolved_at);
            }
            ApiError::WrongState { state, .. } => error["state"] = json!(state),
            _ => {}
        }
        json!({ "error": error })
    }

    /// Logs server-side failures (with their cause) once, where they become responses.
    pub(crate) fn log(&self) {
        if let ApiError::Store(e) = self {
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

impl From<ReviewError> for ApiError {
    fn from(e: ReviewError) -> Self {
        match e {
            ReviewError::NotFound => ApiError::NotFound,
            ReviewError::AlreadyResolved {
                resolution,
                resolved_by,
                resolved_at,
            } => ApiError::AlreadyResolved {
                resolution,
                resolved_by,
                resolved_at,
            },
            ReviewError::WrongState { state, what } => ApiError::WrongState { state, what },
            ReviewError::Invalid(field) => ApiError::invalid(field.field, field.reason),
            ReviewError::Store(e) => ApiError::Store(e),
        }
    }
}

impl From<EnqueueError> for ApiError {
    fn from(e: EnqueueError) -> Self {
        match e {
            EnqueueError::Conflict { operation_id, .. } => ApiError::Conflict { operation_id },
            EnqueueError::Invalid(field) => ApiError::invalid(field.field, field.reason),
            EnqueueError::Database(e) => ApiError::Store(StoreError::Database(e)),
            EnqueueError::KeySecret(e) => ApiError::Store(StoreError::Corrupt(e.to_string())),
        }
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        ApiError::Store(StoreError::Database(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intent::InvalidField;

    #[test]
    fn a_store_validation_error_keeps_its_field() {
        for field in ["note", "actor", "provider_ref"] {
            // The reason mentions another field: the field comes from the error, not the text.
            let error = ApiError::from(ReviewError::Invalid(InvalidField::new(
                field,
                "the actor must give the provider reference in a note",
            )));
            assert_eq!(error.status(), StatusCode::BAD_REQUEST);
            assert_eq!(error.body()["error"]["field"], json!(field), "{field}");
        }
    }
}
