//! `GET /metrics`: refreshes the outbox gauges (at most once per
//! [`crate::metrics::OUTBOX_REFRESH_INTERVAL`]) and encodes every metric.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use super::ApiState;
use crate::metrics::CONTENT_TYPE;

/// `GET /metrics` in the OpenMetrics text format.
pub async fn metrics(State(state): State<ApiState>) -> Response {
    let scraped = state
        .metrics
        .scrape(state.store.as_ref(), state.db.pool_stats())
        .await;
    match scraped {
        Ok(body) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], body).into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics").into_response(),
    }
}
