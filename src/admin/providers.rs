//! `GET /v1/providers`: each running daemon's provider bulkheads (in flight, send window,
//! breaker, `Retry-After` pause, rate-limited waits), as the daemons published them in the
//! database (see [`crate::dispatch::publish`]), so any replica's API shows every replica's
//! view.

use axum::extract::State;
use axum::Json;
use chrono::Utc;
use serde::Serialize;
use utoipa::ToSchema;

use super::auth::Caller;
use super::error::responses::{E401, E500};
use super::{AdminContext, ApiError};
use crate::status::ProviderView;

/// The answer of `GET /v1/providers`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProviderList {
    /// Provider states, ordered by provider, then owner.
    providers: Vec<ProviderView>,
}

/// Every published provider state, by provider then owner, with its age. Provider state
/// holds no tenant data: any valid token may read it.
#[utoipa::path(
    get,
    path = "/v1/providers",
    tag = "providers",
    operation_id = "listProviders",
    summary = "Every running daemon's provider bulkheads as each last published them (no tenant data; any valid token).",
    responses(
        (status = 200, description = "Provider states, ordered by provider, then owner.", body = ProviderList),
        (status = 401, response = E401),
        (status = 500, response = E500),
    )
)]
pub(crate) async fn list_providers(
    State(ctx): State<AdminContext>,
    _caller: Caller,
) -> Result<Json<ProviderList>, ApiError> {
    let rows = ctx.store.list_provider_states().await?;
    Ok(Json(ProviderList {
        providers: crate::status::provider_views(&rows, Utc::now()),
    }))
}
