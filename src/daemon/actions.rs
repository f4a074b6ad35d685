//! Turns the configuration's providers and actions into ready-to-use
//! [`crate::dispatch::ActionRuntime`]s, one HTTP client (connection pool) per provider.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::{Config, ProviderConfig};
use crate::dispatch::{ActionRuntime, ActionTable};
use crate::provider::{ProviderClient, ProviderError, ProviderSettings};
use crate::reconcile::ProbeRuntime;

/// Why an action or provider could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The provider's settings were refused by the HTTP client.
    #[error("provider {provider}: {source}")]
    Provider {
        /// Provider name.
        provider: String,
        /// Cause.
        #[source]
        source: ProviderError,
    },
    /// A field that validation should have caught.
    #[error("{key}: {message}")]
    Invalid {
        /// Config key.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// The lease cannot cover a request with its margin (see
    /// [`crate::dispatch::lease::shortest_lease`]).
    #[error("dispatcher.lease ({lease:?}) must be at least provider {provider}'s request_timeout plus the send margin ({needed:?}): a request is sent only while its lease covers both, so nothing would be sent")]
    LeaseTooShort {
        /// Provider name.
        provider: String,
        /// Configured lease.
        lease: std::time::Duration,
        /// Needed at least.
        needed: std::time::Duration,
    },
}

fn provider_settings(
    name: &str,
    p: &ProviderConfig,
    max_in_flight: usize,
) -> Result<ProviderSettings, BuildError> {
    let invalid = |key: &str, message: String| BuildError::Invalid {
        key: format!("providers.{name}.{key}"),
        message,
    };
    let base_url = url::Url::parse(&p.base_url).map_err(|e| invalid("base_url", e.to_string()))?;
    let mut s = ProviderSettings::new(name, base_url);
    s.connect_timeout = p.connect_timeout;
    s.request_timeout = p.request_timeout;
    s.idempotency_header = p.idempotency_header.clone();
    s.max_response_bytes = usize::try_from(p.max_response_bytes).unwrap_or(usize::MAX);
    s.allow_private_addresses = p.allow_private_addresses;
    s.limits.max_in_flight = max_in_flight;
    s.limits.breaker_failures = p.breaker_failures;
    s.limits.breaker_cooldown = p.breaker_cooldown;
    s.limits.rate_limit = p.rate_limit.and_then(|r| {
        Some(crate::dispatch::RateLimit {
            per_second: std::num::NonZeroU32::new(r.per_second)?,
            burst: std::num::NonZeroU32::new(r.burst)?,
        })
    });
    s.headers = p
        .resolved_headers()
        .map(|(n, v)| (n.to_owned(), v.expose().to_owned()))
        .collect();
    s.signing_secret = p.signing.as_ref().and_then(|signing| signing.key());
    for (status, class) in &p.status_overrides {
        let code: u16 = status.parse().map_err(|_| {
            invalid(
                "status_overrides",
                format!("{status:?} is not a status code"),
            )
        })?;
        s.status_overrides.insert(code, *class);
    }
    Ok(s)
}

/// Builds every configured action; fails on the first provider the HTTP client refuses.
pub fn build_action_table(config: &Config) -> Result<ActionTable, BuildError> {
    let lease = config.dispatcher.lease;
    let mut clients: BTreeMap<&str, Arc<ProviderClient>> = BTreeMap::new();
    for (name, p) in &config.providers {
        let needed = crate::dispatch::lease::shortest_lease(p.request_timeout);
        if lease < needed {
            return Err(BuildError::LeaseTooShort {
                provider: name.clone(),
                lease,
                needed,
            });
        }
        let settings = provider_settings(name, p, config.max_in_flight(name))?;
        let client = ProviderClient::new(&settings).map_err(|source| BuildError::Provider {
            provider: name.clone(),
            source,
        })?;
        clients.insert(name, Arc::new(client));
    }
    let mut actions = Vec::new();
    for (name, a) in &config.actions {
        let invalid = |key: &str, message: String| BuildError::Invalid {
            key: format!("actions.{name}.{key}"),
            message,
        };
        let client = clients
            .get(a.provider.as_str())
            .ok_or_else(|| invalid("provider", format!("unknown provider {:?}", a.provider)))?;
        let method = a
            .http_method()
            .ok_or_else(|| invalid("method", format!("{:?} is not an HTTP method", a.method)))?;
        let key_retention = config.providers[&a.provider].key_retention;
        let probe = a.probe.as_ref().map(ProbeRuntime::from_config).transpose();
        let probe = probe.map_err(|message| invalid("probe.method", message))?;
        actions.push(ActionRuntime {
            name: name.clone(),
            client: client.clone(),
            method,
            path: a.path.clone(),
            retry_safety: a.retry_safety,
            reference_pointer: Some(a.reference_pointer.clone()).filter(|p| !p.is_empty()),
            policy: a.retry.clone(),
            key_retention,
            probe,
        });
    }
    Ok(ActionTable::new(actions))
}
