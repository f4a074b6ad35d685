//! `GET /v1/openapi.json`: the OpenAPI 3.1 description of the `/v1` admin API, a
//! checked-in document (`src/admin/openapi.json`) served as is, without authentication.
//!
//! The document is written by hand rather than generated from annotations, which keeps
//! the handlers and the dependency tree as they are; `tests/it/openapi.rs` keeps it honest:
//! every `/v1` route the router registers is in the document with its methods, every
//! documented route is answered by the router, and the document parses.

use axum::http::header;
use axum::response::IntoResponse;

/// Where the document is served.
pub const PATH: &str = "/v1/openapi.json";

/// The document's text.
pub const DOCUMENT: &str = include_str!("openapi.json");

/// `GET /v1/openapi.json`.
pub async fn document() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], DOCUMENT)
}
