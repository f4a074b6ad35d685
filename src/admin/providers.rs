//! `GET /v1/providers`: each running daemon's provider bulkheads (in flight, send window,
//! breaker, `Retry-After` pause, rate-limited waits), as the daemons published them in the
//! database (see [`crate::dispatch::publish`]), so any replica's API shows every replica's
//! view.

use axum::extract::State;
use axum::Json;
use chrono::Utc;
use serde_json::{json, Value};

use super::auth::Caller;
use super::{AdminContext, ApiError};

/// Every published provider state, by provider then owner, with its age. Provider state
/// holds no tenant data: any valid token may read it.
pub(crate) async fn list_providers(
    State(ctx): State<AdminContext>,
    _caller: Caller,
) -> Result<Json<Value>, ApiError> {
    let rows = ctx.store.list_provider_states().await?;
    Ok(Json(
        json!({"providers": crate::status::providers_json(&rows, Utc::now())}),
    ))
}
