//! Per-provider settings (built by the configuration layer), the request the dispatcher
//! hands to the client, and the errors of building a client from settings.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use url::Url;

use crate::action::AttemptClass;
use crate::provider::address_guard::NonPublicDestination;

/// Everything the client needs to talk to one provider.
#[derive(Clone)]
pub struct ProviderSettings {
    /// The provider's configured name (for logs and errors).
    pub name: String,
    /// Base URL; each request's path is appended to it.
    pub base_url: Url,
    /// Limit for DNS + TCP connect + TLS handshake; must be shorter than `request_timeout`
    /// so that a slow connect is reported as not sent rather than as ambiguous.
    pub connect_timeout: Duration,
    /// Limit for the whole exchange, response body included.
    pub request_timeout: Duration,
    /// Header carrying the downstream idempotency key, e.g. `Idempotency-Key`.
    pub idempotency_header: String,
    /// Largest response body read; a larger body is reported as too large.
    pub max_response_bytes: usize,
    /// Extra headers sent with every request (values may be credentials; never logged).
    pub headers: Vec<(String, String)>,
    /// Standard Webhooks signing key (already decoded, see
    /// [`parse_signing_secret`](crate::provider::parse_signing_secret)); `None` = unsigned.
    pub signing_secret: Option<Vec<u8>>,
    /// Allow loopback, private and link-local destinations (tests, internal providers).
    pub allow_private_addresses: bool,
    /// Status → class overrides for [`crate::provider::classify()`].
    pub status_overrides: BTreeMap<u16, AttemptClass>,
    /// The provider's bulkhead: in-flight cap, breaker, longest `Retry-After` pause.
    pub limits: crate::provider::limits::ProviderLimits,
}

impl ProviderSettings {
    /// Settings with conservative defaults: 5 s connect, 30 s request, `Idempotency-Key`,
    /// 1 MiB response cap, no extra headers, unsigned, public addresses only.
    pub fn new(name: impl Into<String>, base_url: Url) -> Self {
        Self {
            name: name.into(),
            base_url,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            idempotency_header: "Idempotency-Key".to_owned(),
            max_response_bytes: 1024 * 1024,
            headers: Vec::new(),
            signing_secret: None,
            allow_private_addresses: false,
            status_overrides: BTreeMap::new(),
            limits: crate::provider::limits::ProviderLimits::default(),
        }
    }
}

impl fmt::Debug for ProviderSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let header_names: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("ProviderSettings")
            .field("name", &self.name)
            .field("base_url", &self.base_url.as_str())
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("idempotency_header", &self.idempotency_header)
            .field("max_response_bytes", &self.max_response_bytes)
            .field("headers (values redacted)", &header_names)
            .field(
                "signing_secret",
                &self.signing_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("allow_private_addresses", &self.allow_private_addresses)
            .field("status_overrides", &self.status_overrides)
            .finish()
    }
}

/// One HTTP request to a provider, as the dispatcher builds it from an intent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryRequest {
    /// HTTP method (usually `POST`).
    pub method: reqwest::Method,
    /// Path (optionally with `?query`) appended to the provider's base URL.
    pub path: String,
    /// The intent's downstream idempotency key, identical on every attempt.
    pub idempotency_key: String,
    /// The serialized JSON body, sent (and signed) byte for byte.
    pub body: Bytes,
}

impl DeliveryRequest {
    /// A request whose body is `payload` serialized as JSON.
    pub fn json(
        method: reqwest::Method,
        path: impl Into<String>,
        idempotency_key: impl Into<String>,
        payload: &serde_json::Value,
    ) -> Self {
        Self {
            method,
            path: path.into(),
            idempotency_key: idempotency_key.into(),
            body: Bytes::from(payload.to_string()),
        }
    }
}

/// Why a [`ProviderClient`](crate::provider::ProviderClient) could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The base URL is not an absolute `http`/`https` URL with a host.
    #[error("base URL {url} is unusable: {reason}")]
    InvalidBaseUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The base URL names a non-public IP and private addresses are not allowed.
    #[error("base URL refused")]
    NonPublicBaseUrl(#[source] NonPublicDestination),
    /// `connect_timeout` is not shorter than `request_timeout`.
    #[error(
        "connect_timeout ({connect:?}) must be shorter than request_timeout ({request:?}), \
         or slow connects would be misreported as ambiguous"
    )]
    ConnectTimeoutNotShorter {
        /// The configured connect timeout.
        connect: Duration,
        /// The configured request timeout.
        request: Duration,
    },
    /// A configured header name is not a valid HTTP header name.
    #[error("invalid header name {name:?}")]
    InvalidHeaderName {
        /// The name as given.
        name: String,
        /// The parser's error.
        #[source]
        source: reqwest::header::InvalidHeaderName,
    },
    /// A configured header value is not a valid HTTP header value (the value is not shown).
    #[error("invalid value for header {name:?}")]
    InvalidHeaderValue {
        /// The header's name.
        name: String,
        /// The parser's error.
        #[source]
        source: reqwest::header::InvalidHeaderValue,
    },
    /// An extra header would replace one the client sets itself.
    #[error("header {name:?} is set by outboxd and cannot be configured")]
    ReservedHeader {
        /// The header's name.
        name: String,
    },
    /// reqwest could not build the HTTP client (e.g. TLS backend initialisation).
    #[error("could not build the HTTP client")]
    BuildClient(#[source] reqwest::Error),
}
