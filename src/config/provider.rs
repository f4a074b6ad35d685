//! `[providers.NAME]`: one external HTTP API — where it is, how long to wait, how it
//! deduplicates (idempotency header, key retention), extra headers and request signing.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::secret::Secret;
use crate::action::AttemptClass;

/// The prefix of a Standard Webhooks signing secret; the rest is base64.
pub const SIGNING_SECRET_PREFIX: &str = "whsec_";

/// `[providers.NAME]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProviderConfig {
    /// `https://host[:port][/base/path]`, no query; action paths are appended to it.
    pub base_url: String,
    /// Time allowed to establish a connection (a failure here is `not_sent`).
    #[serde(with = "super::duration")]
    pub connect_timeout: Duration,
    /// Time allowed for the whole request once connected (a timeout here is `ambiguous`).
    #[serde(with = "super::duration")]
    pub request_timeout: Duration,
    /// Header carrying the downstream idempotency key.
    pub idempotency_header: String,
    /// How long the provider remembers an idempotency key (Stripe: at least 24h). Keyed
    /// retries after an ambiguous attempt happen only inside this window.
    #[serde(with = "super::duration")]
    pub key_retention: Duration,
    /// Largest response body read; a larger one is truncated and treated as unparseable.
    pub max_response_bytes: u64,
    /// Allow `base_url` to resolve to loopback, private or link-local addresses.
    pub allow_private_addresses: bool,
    /// HTTP status (as a string key, `"409"`) → attempt class, overriding the defaults.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub status_overrides: BTreeMap<String, AttemptClass>,
    /// Extra request headers, e.g. `Authorization = { value_env = "PAYMENTS_AUTH" }`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, HeaderValueConfig>,
    /// Sign each request (Standard Webhooks style) with a `whsec_...` secret.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signing: Option<SigningConfig>,
    /// Requests in flight to this provider at once, at most (its concurrency limit; bounds
    /// the load outboxd puts on it and the request slots it can hold). Intents of a
    /// saturated provider are not claimed. Unset: an equal share of
    /// `dispatcher.concurrency` ([`default_max_in_flight`]), so
    /// the providers' defaults together never exceed it and a slow one cannot hold the
    /// slots of the others. Read it with [`super::Config::max_in_flight`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<usize>,
    /// Consecutive failures (not sent, timeouts, resets, 5xx) that open the circuit
    /// breaker; while open nothing is claimed for this provider. 0 turns it off.
    pub breaker_failures: u32,
    /// How long an open breaker waits before one trial request.
    #[serde(with = "super::duration")]
    pub breaker_cooldown: Duration,
    /// At most this many requests per second to this provider (`None`: unlimited). Set it
    /// to the provider's published limit so its 429s never spend attempts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimitConfig>,
}

/// `rate_limit = { per_second = 50, burst = 10 }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitConfig {
    /// Sustained requests per second (at least 1).
    pub per_second: u32,
    /// Requests allowed at once after a quiet period (default: 1).
    #[serde(default = "one")]
    pub burst: u32,
}

fn one() -> u32 {
    1
}

impl Default for ProviderConfig {
    fn default() -> Self {
        Self {
            base_url: String::new(),
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(10),
            idempotency_header: "Idempotency-Key".to_owned(),
            key_retention: Duration::from_secs(24 * 3600),
            max_response_bytes: 1024 * 1024,
            allow_private_addresses: false,
            status_overrides: BTreeMap::new(),
            headers: BTreeMap::new(),
            signing: None,
            max_in_flight: None,
            breaker_failures: 5,
            breaker_cooldown: Duration::from_secs(30),
            rate_limit: None,
        }
    }
}

impl ProviderConfig {
    /// The configured class for `status`, if it is overridden for this provider.
    pub fn status_override(&self, status: u16) -> Option<AttemptClass> {
        self.status_overrides.get(&status.to_string()).copied()
    }

    /// `base_url` with `path` (which starts with `/`, and may carry a query) appended:
    /// `https://x/api` + `/v1/refunds` → `https://x/api/v1/refunds`.
    pub fn endpoint(&self, path: &str) -> Result<url::Url, url::ParseError> {
        let base = self.base_url.trim_end_matches('/');
        url::Url::parse(&format!("{base}{path}"))
    }

    /// The extra headers with their resolved values (headers that failed to resolve are
    /// skipped; loading reports them as errors).
    pub fn resolved_headers(&self) -> impl Iterator<Item = (&str, &Secret)> {
        self.headers
            .iter()
            .filter_map(|(name, h)| h.value.as_ref().map(|v| (name.as_str(), v)))
    }
}

/// The value of one extra header: exactly one of `value`, `value_env`, `value_file`.
/// After loading, `value` holds the resolved value whichever source it came from. Every
/// header value prints as `[REDACTED]`, credential or not.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HeaderValueConfig {
    /// Literal value (fine for non-secrets; credentials belong in `value_env`/`value_file`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<Secret>,
    /// Environment variable holding the value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_env: Option<String>,
    /// File holding the value (trailing newline ignored).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_file: Option<PathBuf>,
}

/// `[providers.NAME.signing]`: exactly one of `secret`, `secret_env`, `secret_file`.
/// After loading, `secret` holds the resolved `whsec_...` value.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SigningConfig {
    /// Literal secret (discouraged).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<Secret>,
    /// Environment variable holding the secret.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_env: Option<String>,
    /// File holding the secret (trailing newline ignored).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_file: Option<PathBuf>,
}

impl SigningConfig {
    /// The HMAC key: the base64 part of the resolved `whsec_...` secret, decoded.
    pub fn key(&self) -> Option<Vec<u8>> {
        self.secret
            .as_ref()
            .and_then(|s| decode_signing_secret(s.expose()).ok())
    }
}

/// Decodes a `whsec_<base64>` secret into its key bytes, or says what is wrong with it.
pub(crate) fn decode_signing_secret(secret: &str) -> Result<Vec<u8>, String> {
    let Some(encoded) = secret.strip_prefix(SIGNING_SECRET_PREFIX) else {
        return Err(format!("must start with {SIGNING_SECRET_PREFIX:?}"));
    };
    match base64::engine::general_purpose::STANDARD.decode(encoded) {
        Ok(key) if key.is_empty() => Err("has an empty key".to_owned()),
        Ok(key) => Ok(key),
        Err(_) => Err(format!(
            "the part after {SIGNING_SECRET_PREFIX:?} must be standard base64"
        )),
    }
}

/// A provider's `max_in_flight` when it is not configured: an equal share of the
/// dispatcher's `concurrency` request slots among the `providers` configured (at least 1).
/// One provider gets every slot; with several, their defaults add up to at most
/// `concurrency`, so a slow or silent provider holds only its own share and every other
/// provider keeps its slots. A busy provider cannot borrow an idle one's share: raise
/// `concurrency`, or set `max_in_flight`, to give it more.
pub fn default_max_in_flight(concurrency: usize, providers: usize) -> usize {
    (concurrency / providers.max(1)).max(1)
}
