//! An action's status lookup (`[actions.NAME.probe]`) in its runtime form: the request the
//! probe job sends to ask a provider what became of an operation, and how to read the
//! answer. What an answer proves is decided in `crate::reconcile::probe`.

use crate::config::{NotFoundMeaning, ProbeConfig};

/// An action's status lookup, ready to send (built from `[actions.NAME.probe]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeRuntime {
    /// HTTP method of the lookup (usually `GET`).
    pub method: reqwest::Method,
    /// Path template with `{idempotency_key}`, `{operation_id}`, `{tenant}`, `{intent_id}`.
    pub path: String,
    /// JSON pointer to the provider's reference in a 2xx answer (`None`: not configured).
    pub reference_pointer: Option<String>,
    /// Statuses meaning "no such operation".
    pub not_found_status: Vec<u16>,
    /// What a not-found answer proves for this provider.
    pub not_found_means: NotFoundMeaning,
}

impl ProbeRuntime {
    /// The runtime form of a validated probe configuration; the error names what is wrong.
    pub fn from_config(config: &ProbeConfig) -> Result<Self, String> {
        let method = config
            .http_method()
            .ok_or_else(|| format!("{:?} is not an HTTP method", config.method))?;
        Ok(Self {
            method,
            path: config.path.clone(),
            reference_pointer: Some(config.reference_pointer.clone()).filter(|p| !p.is_empty()),
            not_found_status: config.not_found_status.clone(),
            not_found_means: config.not_found_means,
        })
    }
}
