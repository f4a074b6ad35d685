//! `GET /healthz` and `GET /readyz`.
//!
//! * Liveness answers `200 ok` as long as the process can serve HTTP; it never touches
//!   the database, so a database outage does not get the process restarted.
//! * Readiness answers `200` only when the process is not draining, the database answers
//!   within [`READINESS_TIMEOUT`], and the schema is inside this build's compatibility
//!   window (its own version or the next, see [`crate::store::compat`]); otherwise `503`
//!   with a JSON body naming the reason.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Serialize;

use super::ApiState;
use crate::store::compat::check_schema_window;
use crate::store::migrate::expected_version;

/// How long the readiness check waits for the database.
pub const READINESS_TIMEOUT: Duration = Duration::from_secs(2);

/// The body of `/readyz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Readiness {
    /// Whether the process should receive traffic.
    pub ready: bool,
    /// Why not, when not ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `"postgres"` or `"sqlite"`.
    pub backend: &'static str,
    /// The schema version found, when the database answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_version: Option<i64>,
    /// The schema version this build expects.
    pub expected_schema_version: i64,
}

/// `GET /healthz`: the process is alive.
pub async fn healthz() -> &'static str {
    "ok"
}

/// `GET /readyz`: see the module documentation.
pub async fn readyz(State(state): State<ApiState>) -> (StatusCode, Json<Readiness>) {
    let readiness = check_readiness(&state).await;
    let status = if readiness.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(readiness))
}

/// Evaluates readiness (draining first, so a stopping process makes no database call).
pub async fn check_readiness(state: &ApiState) -> Readiness {
    let expected = expected_version();
    let mut readiness = Readiness {
        ready: false,
        reason: None,
        backend: state.db.backend_name(),
        schema_version: None,
        expected_schema_version: expected,
    };
    if state.is_draining() {
        readiness.reason = Some("draining: shutdown in progress".to_owned());
        return readiness;
    }
    match tokio::time::timeout(READINESS_TIMEOUT, state.db.schema_version()).await {
        Err(_) => {
            readiness.reason = Some(format!(
                "database did not answer within {}",
                humantime::format_duration(READINESS_TIMEOUT)
            ));
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "readiness check: database unreachable");
            readiness.reason =
                Some("database unreachable (the daemon's log has the error)".to_owned());
        }
        Ok(Ok(found)) => {
            readiness.schema_version = Some(found);
            match check_schema_window(found, expected) {
                Ok(_) => readiness.ready = true,
                Err(mismatch) => readiness.reason = Some(mismatch.to_string()),
            }
        }
    }
    readiness
}
