//! The configured actions as the dispatcher uses them: each with its provider client,
//! request shape, retry safety and budget. Built once at start from the configuration.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::action::resend::{ResendPolicies, ResendPolicy};
use crate::action::{RetryPolicy, RetrySafety};
pub use crate::provider::path::{encode_segment, render_path, PathFields};
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
    pub probe: Option<crate::provider::lookup::ProbeRuntime>,
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
