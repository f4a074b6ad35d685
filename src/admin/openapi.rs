//! `GET /v1/openapi.json`: the OpenAPI 3.1 description of the `/v1` admin API, generated
//! from the code and served without authentication.
//!
//! The document is not written by hand: every `/v1` route is registered through
//! utoipa-axum's `routes!` ([`super::v1_routes`]), which takes the method and path from
//! the handler's `#[utoipa::path]`, so a route cannot be served without its operation;
//! request and response bodies are the Rust types the handlers deserialize and serialize
//! (`#[derive(ToSchema)]`), so a schema cannot drift from what is sent. What every route
//! shares because one layer or extractor does it (the `x-request-id` header on every
//! request and response, the bearer token) is added here, in one place ([`Shared`]).
//!
//! `docs/openapi.json` is a checked-in copy so API changes show in reviews;
//! `tests/it/openapi.rs` fails when it differs from the generated document
//! (`OUTBOXD_BLESS_OPENAPI=1` rewrites it), checks every documented operation against
//! the real router, and validates real responses against their operation's schema.

use std::sync::OnceLock;

use axum::http::header;
use axum::response::IntoResponse;
use utoipa::openapi::header::Header;
use utoipa::openapi::path::{Operation, ParameterBuilder, ParameterIn};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{OpenApi as Document, RefOr, Required, Response};
use utoipa::{Modify, OpenApi};

use super::error::responses::{E400, E401, E403, E404, E409, E500};
use super::error::ErrorBody;
use crate::api::request_id::{MAX_LEN, X_REQUEST_ID};

/// Where the document is served.
pub const PATH: &str = "/v1/openapi.json";

/// What the document says before the routes are added.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "outboxd admin API",
        version = "1",
        description = "The `/v1` JSON API of the outboxd admin listener. Every request needs `Authorization: Bearer <token>` (except this document); every response carries `x-request-id`. A token has a role (`viewer` reads, `operator` also changes) and a set of tenants: every read and write is scoped to them before the lookup, so something outside the token's tenants answers 404 exactly like something that does not exist. Reference with examples: docs/admin-api.md.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    security(("bearer" = [])),
    components(responses(E400, E401, E403, E404, E409, E500), schemas(ErrorBody)),
    tags(
        (name = "intents", description = "Intents: list, show, cancel, and record one over HTTP."),
        (name = "reconciliation", description = "The reconciliation queue: items whose outcome is unknown, and their resolution."),
        (name = "audit", description = "The audit log of every change made by a person or the daemon."),
        (name = "providers", description = "The provider bulkheads each running daemon publishes."),
        (name = "meta", description = "This document."),
    )
)]
pub(crate) struct ApiDoc;

/// `GET /v1/openapi.json`.
#[utoipa::path(
    get,
    path = "/v1/openapi.json",
    tag = "meta",
    operation_id = "openapi",
    summary = "This document.",
    security(),
    responses(
        (status = 200, description = "The OpenAPI document.", content_type = "application/json", body = Object),
    )
)]
pub(crate) async fn serve() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], document())
}

/// The generated document.
pub fn generate() -> Document {
    let mut document = super::v1_routes().into_openapi();
    Shared.modify(&mut document);
    document
}

/// The generated document as (pretty) JSON text, made once per process.
pub fn document() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        let mut text = generate()
            .to_pretty_json()
            .expect("the OpenAPI document serializes");
        text.push('\n');
        text
    })
}

/// What every `/v1` operation shares: the bearer scheme, the request id header on every
/// request and response, and no token for this document.
struct Shared;

impl Modify for Shared {
    fn modify(&self, document: &mut Document) {
        let components = document.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("A token of `[[admin.tokens]]`."))
                    .build(),
            ),
        );
        for response in components.responses.values_mut() {
            if let RefOr::T(response) = response {
                add_request_id_header(response);
            }
        }
        for (path, item) in document.paths.paths.iter_mut() {
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ];
            for operation in operations.into_iter().flatten() {
                shared_by_every_operation(operation);
                if path == PATH {
                    // Served without a token: no security requirement at all.
                    operation.security = Some(Vec::new());
                }
            }
        }
    }
}

fn shared_by_every_operation(operation: &mut Operation) {
    let parameter = ParameterBuilder::new()
        .name(X_REQUEST_ID.as_str())
        .parameter_in(ParameterIn::Header)
        .required(Required::False)
        .description(Some(format!(
            "Propagated when 1–{MAX_LEN} visible ASCII characters; generated otherwise."
        )))
        .schema(Some(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .max_length(Some(MAX_LEN)),
        ))
        .build();
    operation
        .parameters
        .get_or_insert_with(Vec::new)
        .insert(0, parameter);
    for response in operation.responses.responses.values_mut() {
        if let RefOr::T(response) = response {
            add_request_id_header(response);
        }
    }
}

fn add_request_id_header(response: &mut Response) {
    let mut id = Header::new(ObjectBuilder::new().schema_type(Type::String));
    id.description = Some(
        "The request's id (also in error bodies and the daemon's log lines for the request)."
            .into(),
    );
    response.headers.insert(X_REQUEST_ID.as_str().into(), id);
}
