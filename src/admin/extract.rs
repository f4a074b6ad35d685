//! Request parsing for the JSON API: extractors whose rejections are [`ApiError`]s (so a
//! malformed body or query answers in the same JSON error shape as everything else), and
//! the shared parameters (`older_than`, `limit`, `state`).

use std::time::Duration;

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;

use super::ApiError;
use crate::intent::IntentState;

/// A JSON body; a body that does not parse is a `400` naming what is wrong.
pub(crate) struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(value)) => Ok(ApiJson(value)),
            Err(rejection) => Err(body_error(&rejection)),
        }
    }
}

fn body_error(rejection: &JsonRejection) -> ApiError {
    ApiError::invalid("body", rejection.body_text())
}

/// A query string; one that does not parse is a `400`.
pub(crate) struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(value)| ApiQuery(value))
            .map_err(|rejection: QueryRejection| ApiError::invalid("query", rejection.body_text()))
    }
}

/// A numeric id in the path (an [`crate::intent::IntentId`], a
/// [`crate::store::ReconciliationItemId`]); anything else is `404` (no such thing can exist).
pub(crate) struct IdPath<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for IdPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(id)| IdPath(id))
            .map_err(|_: PathRejection| ApiError::NotFound)
    }
}

/// Default page size of list routes.
pub(crate) const DEFAULT_LIMIT: u32 = 50;
/// Largest page size of list routes.
pub(crate) const MAX_LIMIT: u32 = 500;

/// `limit`: absent → `default`; otherwise 1 ..= `max`.
pub(crate) fn parse_limit(limit: Option<u32>, default: u32, max: u32) -> Result<u32, ApiError> {
    match limit {
        None => Ok(default),
        Some(n) if (1..=max).contains(&n) => Ok(n),
        Some(n) => Err(ApiError::invalid(
            "limit",
            format!("is {n}; it must be between 1 and {max}"),
        )),
    }
}

/// `older_than`: whole seconds (`3600`) or a humantime duration (`2h`, `1h 30m`), turned
/// into the instant before which things must have been created or opened.
pub(crate) fn parse_older_than(
    value: Option<&str>,
    now: DateTime<Utc>,
) -> Result<Option<DateTime<Utc>>, ApiError> {
    let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let age = match value.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => humantime::parse_duration(value).map_err(|e| {
            ApiError::invalid(
                "older_than",
                format!("{e}; use seconds (3600) or a duration like 2h or 1h30m"),
            )
        })?,
    };
    chrono::Duration::from_std(age)
        .ok()
        .and_then(|age| now.checked_sub_signed(age))
        .map(Some)
        .ok_or_else(|| ApiError::invalid("older_than", "is too large"))
}

/// `state`: one of the lifecycle state names.
pub(crate) fn parse_state(value: Option<&str>) -> Result<Option<IntentState>, ApiError> {
    value
        .filter(|v| !v.is_empty())
        .map(|v| {
            IntentState::parse(v).ok_or_else(|| {
                let names: Vec<&str> = IntentState::ALL.iter().map(|s| s.as_str()).collect();
                ApiError::invalid("state", format!("must be one of {}", names.join(", ")))
            })
        })
        .transpose()
}

/// An optional text filter: absent and empty mean "no filter".
pub(crate) fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn older_than_takes_seconds_and_durations() {
        let now = Utc::now();
        let secs = parse_older_than(Some("3600"), now).unwrap().unwrap();
        assert_eq!(now - secs, chrono::Duration::hours(1));
        let human = parse_older_than(Some("1h 30m"), now).unwrap().unwrap();
        assert_eq!(now - human, chrono::Duration::minutes(90));
        assert!(parse_older_than(None, now).unwrap().is_none());
        assert!(parse_older_than(Some("soon"), now).is_err());
        assert!(parse_older_than(Some("-5"), now).is_err());
    }

    #[test]
    fn limit_and_state_are_checked() {
        assert_eq!(parse_limit(None, 50, 500).unwrap(), 50);
        assert!(parse_limit(Some(0), 50, 500).is_err());
        assert!(parse_limit(Some(501), 50, 500).is_err());
        assert_eq!(
            parse_state(Some("unknown")).unwrap(),
            Some(IntentState::Unknown)
        );
        assert!(parse_state(Some("lost")).is_err());
    }
}
