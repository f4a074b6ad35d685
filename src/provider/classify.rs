//! The one pure function that classifies a delivery attempt (design rule 6): an
//! [`Observation`] plus the action's context becomes exactly one [`AttemptClass`], the HTTP
//! status, the provider's reference (for `delivered`) and a short human error.
//!
//! Defaults, in order (a per-provider status override replaces the default for its status):
//!
//! | observation                                  | class        |
//! |----------------------------------------------|--------------|
//! | connect failure, local rate limit, refused   | `not_sent`   |
//! | failure after the request may have been sent | `ambiguous`  |
//! | 2xx (with a usable reference, if configured) | `delivered`  |
//! | 2xx whose reference cannot be read           | `ambiguous`  |
//! | 408, 429, 503 with `Retry-After`             | `retryable`  |
//! | 409 for `idempotent_with_key` (in progress)  | `retryable`  |
//! | any other 4xx (400, 401, 403, 404, 409, 422) | `rejected`   |
//! | 503 without `Retry-After`, any other 5xx     | `ambiguous`  |
//! | 1xx, 3xx (redirects are never followed)      | `ambiguous`  |

use std::collections::BTreeMap;

use serde_json::Value;

use crate::action::{AttemptClass, RetrySafety};
use crate::provider::{Observation, ResponseBody, RetryAfter};

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

/// Longest excerpt of an error response body quoted in [`Classified::error`], in characters.
const BODY_EXCERPT_CHARS: usize = 120;

/// What [`classify()`] needs to know about the action and its provider.
#[derive(Debug, Clone, Copy)]
pub struct ClassifyContext<'a> {
    /// The action's declared retry safety (decides what a 409 means).
    pub retry_safety: RetrySafety,
    /// JSON pointer (RFC 6901) to the provider's reference in a 2xx body, if the action has
    /// one; when set, a 2xx without a usable reference is `ambiguous`.
    pub reference_pointer: Option<&'a str>,
    /// Per-provider status → class overrides; an entry wins over the default table.
    pub status_overrides: &'a BTreeMap<u16, AttemptClass>,
}

/// The classification of one attempt, ready to be recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classified {
    /// Exactly one class.
    pub class: AttemptClass,
    /// The HTTP status, if a response arrived.
    pub http_status: Option<u16>,
    /// The provider's reference; only ever set for `delivered`.
    pub provider_ref: Option<String>,
    /// The provider's `Retry-After`, passed on to the retry decision.
    pub retry_after: Option<RetryAfter>,
    /// Short human explanation; `None` only for `delivered`.
    pub error: Option<String>,
}

/// Classifies one attempt. Pure: no I/O, no clock, never panics.
pub fn classify(observation: &Observation, ctx: &ClassifyContext<'_>) -> Classified {
    match observation {
        Observation::ConnectFailed { error } => {
            without_response(AttemptClass::NotSent, format!("could not connect: {error}"))
        }
        Observation::LocallyRateLimited => without_response(
            AttemptClass::NotSent,
            "held back by the local rate limit".to_owned(),
        ),
        Observation::Refused { reason } => {
            without_response(AttemptClass::NotSent, format!("refused to send: {reason}"))
        }
        Observation::SendFailed {
            timed_out: true, ..
        } => without_response(
            AttemptClass::Ambiguous,
            "request timed out after it was sent".to_owned(),
        ),
        Observation::SendFailed { error, .. } => without_response(
            AttemptClass::Ambiguous,
            format!("connection failed after the request was sent: {error}"),
        ),
        Observation::Response {
            status,
            retry_after,
            body,
        } => classify_response(*status, *retry_after, body, ctx),
    }
}

fn without_response(class: AttemptClass, error: String) -> Classified {
    Classified {
        class,
        http_status: None,
        provider_ref: None,
        retry_after: None,
        error: Some(error),
    }
}

fn classify_response(
    status: u16,
    retry_after: Option<RetryAfter>,
    body: &ResponseBody,
    ctx: &ClassifyContext<'_>,
) -> Classified {
    let (class, error) = match ctx.status_overrides.get(&status) {
        Some(&class) => {
            let text = format!(
                "{} (classified {class} by provider override)",
                status_text(status)
            );
            (class, text)
        }
        None => default_class(status, retry_after, ctx.retry_safety),
    };
    let mut classified = Classified {
        class,
        http_status: Some(status),
        provider_ref: None,
        retry_after,
        error: None,
    };
    if class == AttemptClass::Delivered {
        match delivered_reference(status, body, ctx.reference_pointer) {
            Ok(reference) => classified.provider_ref = reference,
            Err(why) => {
                classified.class = AttemptClass::Ambiguous;
                classified.error = Some(why);
            }
        }
    } else {
        classified.error = Some(match body_excerpt(body) {
            Some(excerpt) => format!("{error}: {excerpt}"),
            None => error,
        });
    }
    classified
}

/// The default status table; the text is unused for `delivered`.
fn default_class(
    status: u16,
    retry_after: Option<RetryAfter>,
    retry_safety: RetrySafety,
) -> (AttemptClass, String) {
    use AttemptClass::*;
    let keyed = retry_safety == RetrySafety::IdempotentWithKey;
    match (status, retry_after) {
        (200..=299, _) => (Delivered, String::new()),
        (408, _) => (Retryable, status_text(status)),
        (429 | 503, Some(after)) => (Retryable, format!("HTTP {status} with Retry-After {after}")),
        (429, None) => (Retryable, status_text(status)),
        (503, None) => (Ambiguous, format!("HTTP {status} without Retry-After")),
        (409, _) if keyed => (
            Retryable,
            "HTTP 409: a request with this idempotency key is still in progress".to_owned(),
        ),
        (400..=499, _) => (Rejected, status_text(status)),
        (500..=599, _) => (Ambiguous, status_text(status)),
        (100..=199, _) => (
            Ambiguous,
            format!("{} instead of a final response", status_text(status)),
        ),
        (300..=399, _) => (
            Ambiguous,
            format!(
                "{} (redirects are not followed; the provider may have acted)",
                status_text(status)
            ),
        ),
        _ => (
            Ambiguous,
            format!("HTTP {status} is not a valid status code"),
        ),
    }
}

/// The provider reference of a `delivered` response: `Ok(None)` when no pointer is
/// configured (the body is ignored), `Err` with the reason when it cannot be read.
fn delivered_reference(
    status: u16,
    body: &ResponseBody,
    pointer: Option<&str>,
) -> Result<Option<String>, String> {
    let Some(pointer) = pointer else {
        return Ok(None);
    };
    let bytes = match body {
        ResponseBody::Complete(bytes) => bytes,
        ResponseBody::TooLarge { limit } => {
            return Err(format!(
                "HTTP {status} but the body exceeds {limit} bytes, so the provider reference \
                 at {pointer} could not be read"
            ))
        }
        ResponseBody::ReadFailed(why) => {
            return Err(format!("HTTP {status} but reading the body failed: {why}"))
        }
    };
    let json: Value = serde_json::from_slice(bytes)
        .map_err(|e| format!("HTTP {status} but the body is not JSON ({e})"))?;
    match json.pointer(pointer) {
        Some(Value::String(text)) if !text.is_empty() => Ok(Some(text.clone())),
        Some(Value::Number(number)) => Ok(Some(number.to_string())),
        Some(other) => Err(format!(
            "HTTP {status} but the provider reference at {pointer} is {}, not a string or number",
            json_kind(other)
        )),
        None => Err(format!(
            "HTTP {status} but the body has no provider reference at {pointer}"
        )),
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(text) if text.is_empty() => "an empty string",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// "HTTP 503 Service Unavailable", or "HTTP 599" for a status without a standard name.
fn status_text(status: u16) -> String {
    let reason = reqwest::StatusCode::from_u16(status)
        .ok()
        .and_then(|code| code.canonical_reason());
    match reason {
        Some(reason) => format!("HTTP {status} {reason}"),
        None => format!("HTTP {status}"),
    }
}

/// A short single-line excerpt of an error body, for operators; `None` if empty.
fn body_excerpt(body: &ResponseBody) -> Option<String> {
    let ResponseBody::Complete(bytes) = body else {
        return None;
    };
    let text = String::from_utf8_lossy(bytes);
    let mut words = text
        .split_whitespace()
        .flat_map(|word| std::iter::once(' ').chain(word.chars().filter(|c| !c.is_control())));
    words.next(); // the leading separator
    let excerpt: String = words.by_ref().take(BODY_EXCERPT_CHARS).collect();
    if excerpt.is_empty() {
        return None;
    }
    let truncated = words.next().is_some();
    Some(if truncated {
        format!("{excerpt}…")
    } else {
        excerpt
    })
}
