//! `[actions.NAME]`: what an intent of a given action turns into on the wire (provider,
//! method, path), how safe it is to retry, its retry budget, and an optional status probe
//! used to resolve unknown outcomes.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::duration::format_duration;

use crate::action::{RetryPolicy, RetrySafety};

/// Placeholders allowed in a probe path; each is replaced by the intent's value.
pub const PROBE_PLACEHOLDERS: [&str; 4] =
    ["idempotency_key", "operation_id", "tenant", "intent_id"];

/// HTTP methods accepted for actions and probes (case-sensitive).
pub const HTTP_METHODS: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

/// `[actions.NAME]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionConfig {
    /// Name of the `[providers.NAME]` entry that receives this action.
    #[serde(default)]
    pub provider: String,
    /// HTTP method (upper case), `POST` by default.
    #[serde(default = "default_action_method")]
    pub method: String,
    /// Path appended to the provider's `base_url`; starts with `/`.
    #[serde(default)]
    pub path: String,
    /// `safe_always`, `idempotent_with_key` or `not_idempotent` (required: declare it).
    pub retry_safety: RetrySafety,
    /// JSON pointer to the provider's reference in a 2xx body (`/id`); `""` = none.
    #[serde(default)]
    pub reference_pointer: String,
    /// Retry budget; keys left out take [`RetryPolicy::default`] values.
    #[serde(
        default,
        deserialize_with = "deserialize_retry",
        serialize_with = "serialize_retry"
    )]
    pub retry: RetryPolicy,
    /// Optional status lookup used to resolve unknown outcomes automatically.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<ProbeConfig>,
}

impl ActionConfig {
    /// The method as a `reqwest::Method` (`None` only for an unvalidated config).
    pub fn http_method(&self) -> Option<reqwest::Method> {
        parse_method(&self.method)
    }
}

/// What a probe's "not found" answer means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotFoundMeaning {
    /// The provider never applied the operation: the intent may be redispatched.
    NotApplied,
    /// Nothing can be concluded; the item stays for a person.
    #[default]
    Unknown,
}

/// `[actions.NAME.probe]`: look the operation up at the provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeConfig {
    /// HTTP method, `GET` by default.
    #[serde(default = "default_probe_method")]
    pub method: String,
    /// Path (and query) with placeholders from [`PROBE_PLACEHOLDERS`] in braces:
    /// `/v1/refunds?idempotency_key={idempotency_key}`.
    #[serde(default)]
    pub path: String,
    /// JSON pointer to the provider's reference in a 2xx answer; `""` = none.
    #[serde(default)]
    pub reference_pointer: String,
    /// Statuses meaning "no such operation" (default `[404]`).
    #[serde(default = "default_not_found_status")]
    pub not_found_status: Vec<u16>,
    /// `not_applied` or `unknown` (default): what a not-found answer proves.
    #[serde(default)]
    pub not_found_means: NotFoundMeaning,
}

impl ProbeConfig {
    /// The method as a `reqwest::Method` (`None` only for an unvalidated config).
    pub fn http_method(&self) -> Option<reqwest::Method> {
        parse_method(&self.method)
    }

    /// Whether `status` means "no such operation".
    pub fn is_not_found(&self, status: u16) -> bool {
        self.not_found_status.contains(&status)
    }
}

fn parse_method(method: &str) -> Option<reqwest::Method> {
    HTTP_METHODS
        .contains(&method)
        .then(|| reqwest::Method::from_bytes(method.as_bytes()).ok())
        .flatten()
}

fn default_action_method() -> String {
    "POST".to_owned()
}

fn default_probe_method() -> String {
    "GET".to_owned()
}

fn default_not_found_status() -> Vec<u16> {
    vec![404]
}

/// `[actions.NAME.retry]` as written: every key optional.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PartialRetry {
    #[serde(default)]
    max_attempts: Option<u32>,
    #[serde(default, with = "humantime_serde::option")]
    initial_backoff: Option<Duration>,
    #[serde(default, with = "humantime_serde::option")]
    max_backoff: Option<Duration>,
    #[serde(default, with = "humantime_serde::option")]
    deadline: Option<Duration>,
    #[serde(default, with = "humantime_serde::option")]
    max_retry_after: Option<Duration>,
}

/// Prints a retry policy with compact durations (`"1d"` rather than `"1day"`).
fn serialize_retry<S: Serializer>(retry: &RetryPolicy, serializer: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct View {
        max_attempts: u32,
        initial_backoff: String,
        max_backoff: String,
        deadline: String,
        max_retry_after: String,
    }
    View {
        max_attempts: retry.max_attempts,
        initial_backoff: format_duration(retry.initial_backoff),
        max_backoff: format_duration(retry.max_backoff),
        deadline: format_duration(retry.deadline),
        max_retry_after: format_duration(retry.max_retry_after),
    }
    .serialize(serializer)
}

fn deserialize_retry<'de, D: Deserializer<'de>>(deserializer: D) -> Result<RetryPolicy, D::Error> {
    let partial = PartialRetry::deserialize(deserializer)?;
    let default = RetryPolicy::default();
    Ok(RetryPolicy {
        max_attempts: partial.max_attempts.unwrap_or(default.max_attempts),
        initial_backoff: partial.initial_backoff.unwrap_or(default.initial_backoff),
        max_backoff: partial.max_backoff.unwrap_or(default.max_backoff),
        deadline: partial.deadline.unwrap_or(default.deadline),
        max_retry_after: partial.max_retry_after.unwrap_or(default.max_retry_after),
    })
}

/// The placeholder names in `path` (`{name}` → `name`), in order, or why its braces do not
/// balance. Consumers substitute [`PROBE_PLACEHOLDERS`] values (percent-encoded).
pub fn placeholders(path: &str) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    let mut rest = path;
    while let Some(open) = rest.find(['{', '}']) {
        if rest[open..].starts_with('}') {
            return Err(format!("{path:?} has a \"}}\" without a matching \"{{\""));
        }
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            return Err(format!("{path:?} has a \"{{\" without a matching \"}}\""));
        };
        let name = &after[..close];
        if name.contains('{') {
            return Err(format!("{path:?} has a \"{{\" without a matching \"}}\""));
        }
        names.push(name.to_owned());
        rest = &after[close + 1..];
    }
    Ok(names)
}

/// What the resend rule needs about each configured action whose provider is configured
/// (for the CLI, which has the configuration but no dispatcher).
pub fn resend_policies(config: &super::Config) -> crate::action::resend::ResendPolicies {
    crate::action::resend::ResendPolicies::new(config.actions.iter().filter_map(
        |(name, action)| {
            let provider = config.providers.get(&action.provider)?;
            Some((
                name.clone(),
                crate::action::resend::ResendPolicy {
                    retry_safety: action.retry_safety,
                    key_retention: provider.key_retention,
                    request_timeout: provider.request_timeout,
                },
            ))
        },
    ))
}
