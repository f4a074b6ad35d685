//! The configured actions as the dispatcher uses them: each with its provider client,
//! request shape, retry safety and budget. Built once at start from the configuration.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::action::resend::{ResendPolicies, ResendPolicy};
use crate::action::{RetryPolicy, RetrySafety};
use crate::provider::ProviderClient;

/// One action, ready to deliver.
#[derive(Debug, Clone)]
pub struct ActionRuntime {
    /// The action name intents carry.
    pub name: String,
    /// The provider's HTTP client (shared by the provider's actions: one connection pool).
    pub client: Arc<ProviderClient>,
    /// HTTP method.
    pub method: reqwest::Method,
    /// Path template appended to the provider's base URL (see [`render_path`]).
    pub path: String,
    /// How safe it is to send again.
    pub retry_safety: RetrySafety,
    /// JSON pointer to the provider's reference in a 2xx body.
    pub reference_pointer: Option<String>,
    /// Retry budget.
    pub policy: RetryPolicy,
    /// How long the provider remembers an idempotency key.
    pub key_retention: Duration,
    /// The status lookup that lets probes resolve unknown outcomes (`None`: no probe).
    pub probe: Option<crate::reconcile::ProbeRuntime>,
}

impl ActionRuntime {
    /// What the resend rule needs to know about this action.
    pub fn resend_policy(&self) -> ResendPolicy {
        ResendPolicy {
            retry_safety: self.retry_safety,
            key_retention: self.key_retention,
            request_timeout: self.client.request_timeout(),
        }
    }
}

/// Every configured action by name.
#[derive(Debug, Clone, Default)]
pub struct ActionTable {
    actions: BTreeMap<String, Arc<ActionRuntime>>,
}

impl ActionTable {
    /// A table of the given actions.
    pub fn new(actions: impl IntoIterator<Item = ActionRuntime>) -> Self {
        Self {
            actions: actions
                .into_iter()
                .map(|a| (a.name.clone(), Arc::new(a)))
                .collect(),
        }
    }

    /// The action called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<ActionRuntime>> {
        self.actions.get(name)
    }

    /// Every configured action name (the claim only takes intents of these).
    pub fn names(&self) -> Vec<String> {
        self.actions.keys().cloned().collect()
    }

    /// Every action's [`ResendPolicy`], for the admin surface's redispatch checks.
    pub fn resend_policies(&self) -> ResendPolicies {
        ResendPolicies::new(
            self.actions
                .iter()
                .map(|(name, a)| (name.clone(), a.resend_policy())),
        )
    }

    /// Whether no action is configured.
    pub fn is_empty(&self) -> bool {
        self.actions.is_empty()
    }
}

/// The intent fields a path template may use.
#[derive(Debug, Clone, Copy)]
pub struct PathFields<'a> {
    /// `{tenant}`.
    pub tenant: &'a str,
    /// `{operation_id}`.
    pub operation_id: &'a str,
    /// `{idempotency_key}`.
    pub idempotency_key: &'a str,
    /// `{intent_id}`.
    pub intent_id: i64,
}

/// Fills `{tenant}`, `{operation_id}`, `{idempotency_key}` and `{intent_id}` (the names in
/// [`crate::config::PROBE_PLACEHOLDERS`]) in `template`, percent-encoding each value with
/// [`encode_segment`] so it stays one path segment or query value whatever it contains.
/// (A value of `.` or `..` alone in a segment is still a dot segment to URL parsers,
/// encoded or not; the client refuses to send such a path.)
pub fn render_path(template: &str, fields: PathFields<'_>) -> String {
    let encode = encode_segment;
    template
        .replace("{tenant}", &encode(fields.tenant))
        .replace("{operation_id}", &encode(fields.operation_id))
        .replace("{idempotency_key}", &encode(fields.idempotency_key))
        .replace("{intent_id}", &fields.intent_id.to_string())
}

/// Strict percent-encoding for a path segment: every byte except the RFC 3986 unreserved
/// `ALPHA / DIGIT / - / _ / ~` becomes `%XX` — `.` included (so `..` cannot survive as
/// text), and `/ ? # % +`, spaces and non-ASCII bytes, so no value can add a segment, a
/// query, a fragment or an escape.
pub fn encode_segment(value: &str) -> String {
    let mut encoded = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'~') {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_placeholders_are_filled_and_encoded() {
        let fields = PathFields {
            tenant: "acme corp",
            operation_id: "op/42",
            idempotency_key: "obx1_ab",
            intent_id: 7,
        };
        assert_eq!(
            render_path(
                "/t/{tenant}/ops/{operation_id}?key={idempotency_key}&i={intent_id}",
                fields
            ),
            "/t/acme%20corp/ops/op%2F42?key=obx1_ab&i=7"
        );
        assert_eq!(render_path("/v1/refunds", fields), "/v1/refunds");
        let dots = PathFields {
            tenant: "..",
            operation_id: "a.b+c",
            idempotency_key: "{tenant}",
            intent_id: 7,
        };
        assert_eq!(
            render_path("/{tenant}/{operation_id}/{idempotency_key}", dots),
            "/%2E%2E/a%2Eb%2Bc/%7Btenant%7D"
        );
    }
}
