//! Every answer the admin tests receive from the real router is checked against the
//! generated OpenAPI document ([`check_response`], called by [`super::admin::Api`]): the
//! status must be documented for the operation, and the body must validate against that
//! response's schema. The validator is small on purpose: `$ref`, `type` (also a list),
//! `enum`, `required`, `properties`, `additionalProperties`, `items`, `allOf`/`oneOf`/
//! `anyOf`, integer bounds and `date-time` strings, which is what the document uses.

use std::sync::OnceLock;

use serde_json::Value;

/// The generated document, as JSON.
pub fn document() -> &'static Value {
    static DOCUMENT: OnceLock<Value> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        serde_json::from_str(outboxd::admin::openapi::document()).expect("the document parses")
    })
}

/// The documented path template `path` (without its query) falls under, if any.
pub fn template_of(path: &str) -> Option<&'static str> {
    let path = path.split('?').next().unwrap_or(path);
    let segments: Vec<&str> = path.split('/').collect();
    let paths = document()["paths"].as_object()?;
    // A literal segment beats a parameter (`/redispatch` over `/{id}`), as in the router.
    let mut best: Option<(&'static str, usize)> = None;
    for template in paths.keys() {
        let parts: Vec<&str> = template.split('/').collect();
        if parts.len() != segments.len() {
            continue;
        }
        let mut literal = 0;
        let fits = parts.iter().zip(&segments).all(|(p, s)| {
            if p.starts_with('{') {
                true
            } else {
                literal += 1;
                p == s
            }
        });
        if fits && best.is_none_or(|(_, l)| literal > l) {
            best = Some((template.as_str(), literal));
        }
    }
    best.map(|(t, _)| t)
}

/// Panics unless `status` is documented for `method path` and `body` validates against
/// its schema. Requests to no documented operation are not checked (the router answers
/// them 404/405 itself).
pub fn check_response(method: &str, path: &str, status: u16, body: &Value) {
    let Some(template) = template_of(path) else {
        return;
    };
    let operation = &document()["paths"][template][method.to_lowercase()];
    if operation.is_null() {
        return;
    }
    let Some(response) = operation["responses"].get(status.to_string()) else {
        panic!("{method} {path}: status {status} is not documented for {template}: {body}");
    };
    let response = resolve(response);
    let schema = &response["content"]["application/json"]["schema"];
    if schema.is_null() {
        return;
    }
    let mut errors = Vec::new();
    validate(schema, body, "$", &mut errors);
    assert!(
        errors.is_empty(),
        "{method} {path} ({status}) does not match the {template} schema:\n  {}\nbody: {body:#}",
        errors.join("\n  ")
    );
}

/// `value` itself or, for a `$ref`, what it points to inside the document.
fn resolve(value: &Value) -> &Value {
    match value.get("$ref").and_then(Value::as_str) {
        Some(reference) => {
            let pointer = reference.strip_prefix('#').expect("a local $ref");
            resolve(document().pointer(pointer).expect("the $ref resolves"))
        }
        None => value,
    }
}

fn type_matches(name: &str, value: &Value) -> bool {
    match name {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        other => panic!("unknown schema type {other}"),
    }
}

/// Appends to `errors` every way `value` (at `at`) breaks `schema`.
pub fn validate(schema: &Value, value: &Value, at: &str, errors: &mut Vec<String>) {
    let schema = resolve(schema);
    if let Some(all) = schema["allOf"].as_array() {
        for part in all {
            validate(part, value, at, errors);
        }
    }
    for (key, exactly_one) in [("oneOf", true), ("anyOf", false)] {
        if let Some(options) = schema[key].as_array() {
            let fitting = options
                .iter()
                .filter(|option| {
                    let mut e = Vec::new();
                    validate(option, value, at, &mut e);
                    e.is_empty()
                })
                .count();
            if fitting == 0 || (exactly_one && fitting > 1) {
                errors.push(format!("{at}: {fitting} of the {key} schemas fit {value}"));
            }
        }
    }
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if !types.is_empty() && !types.iter().any(|t| type_matches(t, value)) {
        errors.push(format!("{at}: {value} is not {}", types.join(" or ")));
        return;
    }
    if let Some(allowed) = schema["enum"].as_array() {
        if !allowed.contains(value) {
            errors.push(format!("{at}: {value} is not one of {allowed:?}"));
        }
    }
    if let (Some(n), Some(min)) = (value.as_f64(), schema["minimum"].as_f64()) {
        if n < min {
            errors.push(format!("{at}: {n} is below {min}"));
        }
    }
    if let (Some(n), Some(max)) = (value.as_f64(), schema["maximum"].as_f64()) {
        if n > max {
            errors.push(format!("{at}: {n} is above {max}"));
        }
    }
    if let (Some(text), Some("date-time")) = (value.as_str(), schema["format"].as_str()) {
        if chrono::DateTime::parse_from_rfc3339(text).is_err() {
            errors.push(format!("{at}: {text:?} is not a date-time"));
        }
    }
    if let Some(object) = value.as_object() {
        for name in schema["required"].as_array().into_iter().flatten() {
            let name = name.as_str().unwrap_or_default();
            if !object.contains_key(name) {
                errors.push(format!("{at}: required field {name:?} is missing"));
            }
        }
        let properties = schema["properties"].as_object();
        for (name, field) in object {
            let here = format!("{at}.{name}");
            match properties.and_then(|p| p.get(name)) {
                Some(property) => validate(property, field, &here, errors),
                None => match &schema["additionalProperties"] {
                    Value::Bool(false) => {
                        errors.push(format!("{here}: not in the schema"));
                    }
                    extra @ Value::Object(_) => validate(extra, field, &here, errors),
                    _ => {}
                },
            }
        }
    }
    if let (Some(items), Some(schema)) = (value.as_array(), schema.get("items")) {
        for (i, item) in items.iter().enumerate() {
            validate(schema, item, &format!("{at}[{i}]"), errors);
        }
    }
}
