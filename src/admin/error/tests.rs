//! Every error an admin request can end with → its HTTP status, code, message and the
//! extra fields of the JSON body, as one table.

use chrono::{TimeZone, Utc};
use serde_json::{json, Value};

use super::*;
use crate::wire_key::KeySecretError;

/// The error's JSON body.
fn body(error: &ApiError) -> Value {
    serde_json::to_value(error.body()).unwrap()
}

fn resolved_at() -> chrono::DateTime<Utc> {
    Utc.with_ymd_and_hms(2024, 5, 1, 12, 0, 0).unwrap()
}

/// Each variant (the wrapped ones by their own variants) with its status, code, message
/// and the body's fields besides `code` and `message`.
fn table() -> Vec<(ApiError, StatusCode, &'static str, String, Value)> {
    let database = || sqlx::Error::PoolTimedOut;
    vec![
        (
            ApiError::Unauthenticated,
            StatusCode::UNAUTHORIZED,
            "unauthenticated",
            "a valid bearer token is required".into(),
            json!({}),
        ),
        (
            Forbidden::ViewerRole.into(),
            StatusCode::FORBIDDEN,
            "forbidden",
            "this token has the viewer role; changes need an operator token".into(),
            json!({}),
        ),
        (
            ApiError::NotFound,
            StatusCode::NOT_FOUND,
            "not_found",
            "not found".into(),
            json!({}),
        ),
        (
            ApiError::invalid("older_than", "is too large"),
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "invalid older_than: is too large".into(),
            json!({"field": "older_than"}),
        ),
        (
            ReviewError::NotFound.into(),
            StatusCode::NOT_FOUND,
            "not_found",
            "not found".into(),
            json!({}),
        ),
        (
            ReviewError::AlreadyResolved {
                resolution: "delivered".into(),
                resolved_by: "probe".into(),
                resolved_at: resolved_at(),
            }
            .into(),
            StatusCode::CONFLICT,
            "already_resolved",
            "already resolved as delivered by probe at 2024-05-01 12:00:00 UTC".into(),
            json!({"resolution": "delivered", "resolved_by": "probe",
                "resolved_at": "2024-05-01T12:00:00Z"}),
        ),
        (
            ReviewError::WrongState {
                state: "delivered".into(),
                what: "only a pending intent can be cancelled",
            }
            .into(),
            StatusCode::CONFLICT,
            "wrong_state",
            "intent is delivered; only a pending intent can be cancelled".into(),
            json!({"state": "delivered"}),
        ),
        (
            ReviewError::Invalid(InvalidField::new("note", "a note saying why is required")).into(),
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "invalid note: a note saying why is required".into(),
            json!({"field": "note"}),
        ),
        (
            ReviewError::Store(StoreError::Database(database())).into(),
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error; details in the log".into(),
            json!({}),
        ),
        (
            EnqueueError::Conflict {
                tenant: "acme".into(),
                operation_id: "refund-7".into(),
            }
            .into(),
            StatusCode::CONFLICT,
            "conflict",
            "operation \"refund-7\" was already recorded with a different payload".into(),
            json!({}),
        ),
        (
            EnqueueError::Invalid(InvalidField::new("tenant", "must not be empty")).into(),
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "invalid tenant: must not be empty".into(),
            json!({"field": "tenant"}),
        ),
        (
            EnqueueError::Database(database()).into(),
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error; details in the log".into(),
            json!({}),
        ),
        (
            EnqueueError::KeySecret(KeySecretError::Malformed).into(),
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error; details in the log".into(),
            json!({}),
        ),
        (
            StoreError::Corrupt("state \"lost\"".into()).into(),
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error; details in the log".into(),
            json!({}),
        ),
    ]
}

#[test]
fn each_error_has_its_status_code_message_and_fields() {
    for (error, status, code, message, fields) in table() {
        assert_eq!(error.status(), status, "{error:?}");
        assert_eq!(error.code(), code, "{error:?}");
        let body = body(&error);
        assert_eq!(body["error"]["message"], json!(message), "{error:?}");
        let mut expected = json!({"code": code, "message": message});
        for (key, value) in fields.as_object().unwrap() {
            expected[key] = value.clone();
        }
        assert_eq!(body["error"], expected, "{error:?}");
    }
}

#[test]
fn a_failure_is_a_500_whose_cause_is_logged_and_never_shown() {
    for (error, status, ..) in table() {
        let failed = status == StatusCode::INTERNAL_SERVER_ERROR;
        assert_eq!(error.internal().is_some(), failed, "{error:?}");
        assert_eq!(error.to_string() == INTERNAL, failed, "{error:?}");
    }
    let error = ApiError::from(ReviewError::Store(StoreError::Corrupt("state x".into())));
    let cause = error.internal().unwrap().to_string();
    assert!(cause.contains("state x"), "{cause}");
    assert!(!body(&error).to_string().contains("state x"));
}

/// The OpenAPI document lists the codes as `ErrorCode` serializes them.
#[test]
fn every_code_is_written_as_the_document_names_it() {
    for (error, ..) in table() {
        let code = error.status_and_code().1;
        assert_eq!(serde_json::to_value(code).unwrap(), json!(error.code()));
    }
}

#[test]
fn a_store_validation_error_keeps_its_field() {
    for field in ["note", "actor", "provider_ref"] {
        // The reason mentions another field: the field comes from the error, not the text.
        let error = ApiError::from(ReviewError::Invalid(InvalidField::new(
            field,
            "the actor must give the provider reference in a note",
        )));
        assert_eq!(error.status(), StatusCode::BAD_REQUEST);
        assert_eq!(body(&error)["error"]["field"], json!(field), "{field}");
    }
}
