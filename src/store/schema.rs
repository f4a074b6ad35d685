//! OpenAPI schemas of the store's text fields whose values are a fixed set of names
//! (`#[schema(schema_with = ...)]` on the row types), so the admin API's document lists
//! them. The name lists are the ones the code writes and checks (tested below).

use serde_json::Value;
use utoipa::openapi::schema::{Object, ObjectBuilder, SchemaType, Type};

/// The circuit breaker states a daemon publishes (`Breaker::as_str`).
pub const BREAKER_STATES: [&str; 3] = ["closed", "open", "half_open"];

/// The resolutions of a reconciliation item ([`super::ResolutionKind::as_str`]).
pub const RESOLUTIONS: [&str; 3] = ["delivered", "redispatch", "abandoned"];

/// A string that is one of `names`.
pub(crate) fn one_of(names: &[&str]) -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(names.iter().copied()))
        .build()
}

/// A string that is one of `names`, or null.
pub(crate) fn one_of_or_null(names: &[&str]) -> Object {
    let values = names.iter().map(|n| Value::from(*n)).chain([Value::Null]);
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .enum_values(Some(values))
        .build()
}

/// `ProviderStateRow::breaker`.
pub(crate) fn breaker_state() -> Object {
    one_of(&BREAKER_STATES)
}

/// A resolution's name (the body of a resolve request).
pub(crate) fn resolution() -> Object {
    one_of(&RESOLUTIONS)
}

/// `ReconciliationItem::resolution`.
pub(crate) fn resolution_or_null() -> Object {
    one_of_or_null(&RESOLUTIONS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ResolutionKind;

    #[test]
    fn the_resolution_names_are_the_stored_ones() {
        let kinds = [
            ResolutionKind::Delivered {
                provider_ref: "r".into(),
            },
            ResolutionKind::Redispatch,
            ResolutionKind::Abandoned,
        ];
        let names: Vec<&str> = kinds.iter().map(|k| k.as_str()).collect();
        assert_eq!(names, RESOLUTIONS);
    }
}
