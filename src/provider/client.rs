//! The HTTP client for one provider (reqwest): builds each request (JSON body, the
//! idempotency key header, configured headers, optional Standard Webhooks signature),
//! sends it, and reports what happened as an [`Observation`] — never an error.
//!
//! Hardening: redirects are never followed (a 303 after a POST is classified, not chased),
//! no proxy from the environment, bounded connect and request time, a response size cap
//! applied while streaming, and (unless allowed) no loopback / private destinations.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{self, HeaderMap, HeaderName, HeaderValue};
use url::Url;

use crate::action::AttemptClass;
use crate::provider::address_guard::{check_literal_host, PublicOnlyResolver};
use crate::provider::signing::{
    self, WEBHOOK_ID_HEADER, WEBHOOK_SIGNATURE_HEADER, WEBHOOK_TIMESTAMP_HEADER,
};
use crate::provider::{DeliveryRequest, Observation, ProviderError, ProviderSettings};

mod observe;
use observe::{observe_response, observe_send_error};

#[cfg(test)]
mod path_tests;
#[cfg(test)]
mod test_server;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod validation_tests;

/// How long an idle pooled connection is kept for the next delivery.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// TCP keep-alive probe interval on pooled connections.
const TCP_KEEPALIVE: Duration = Duration::from_secs(60);

/// Makes ring the process's rustls crypto provider, once: reqwest is built without a
/// provider of its own (its default would pull in a second crypto library beside the ring
/// that sqlx uses), and building any `reqwest::Client` before a provider is installed
/// panics. [`ProviderClient::new`] calls it; a program that embeds outboxd and builds
/// clients of its own calls it first. A provider installed earlier is kept.
pub fn install_crypto_provider() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        // Err means a provider is already installed; that one is used.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Delivers requests to one provider. Clones share one connection pool.
#[derive(Clone)]
pub struct ProviderClient {
    name: String,
    base_url: Url,
    http: reqwest::Client,
    idempotency_header: HeaderName,
    extra_headers: HeaderMap,
    signing_secret: Option<Vec<u8>>,
    max_response_bytes: usize,
    allow_private_addresses: bool,
    status_overrides: BTreeMap<u16, AttemptClass>,
    request_timeout: std::time::Duration,
    limits: crate::provider::limits::ProviderLimits,
}

impl std::fmt::Debug for ProviderClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderClient")
            .field("name", &self.name)
            .field("base_url", &self.base_url.as_str())
            .field("signed", &self.signing_secret.is_some())
            .finish_non_exhaustive()
    }
}

impl ProviderClient {
    /// Validates `settings` and builds the client.
    pub fn new(settings: &ProviderSettings) -> Result<Self, ProviderError> {
        validate_base_url(&settings.base_url)?;
        if !settings.allow_private_addresses {
            check_literal_host(&settings.base_url).map_err(ProviderError::NonPublicBaseUrl)?;
        }
        if settings.connect_timeout >= settings.request_timeout {
            return Err(ProviderError::ConnectTimeoutNotShorter {
                connect: settings.connect_timeout,
                request: settings.request_timeout,
            });
        }
        install_crypto_provider();
        let idempotency_header = parse_header_name(&settings.idempotency_header)?;
        let extra_headers = extra_headers(&settings.headers, &idempotency_header)?;
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(settings.connect_timeout)
            .timeout(settings.request_timeout)
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .tcp_keepalive(TCP_KEEPALIVE)
            .tcp_nodelay(true)
            .user_agent(concat!("outboxd/", env!("CARGO_PKG_VERSION")));
        if !settings.allow_private_addresses {
            builder = builder.dns_resolver(Arc::new(PublicOnlyResolver));
        }
        if settings.base_url.scheme() != "https" {
            // No TLS is ever spoken (redirects are not followed), so no trust store is
            // needed: without this, building the client loads the system's certificates
            // and fails on a host that has none, although only plain HTTP is used.
            builder = builder.tls_certs_only(std::iter::empty());
        }
        Ok(Self {
            request_timeout: settings.request_timeout,
            name: settings.name.clone(),
            base_url: settings.base_url.clone(),
            http: builder.build().map_err(ProviderError::BuildClient)?,
            idempotency_header,
            extra_headers,
            signing_secret: settings.signing_secret.clone(),
            max_response_bytes: settings.max_response_bytes,
            allow_private_addresses: settings.allow_private_addresses,
            status_overrides: settings.status_overrides.clone(),
            limits: settings.limits,
        })
    }

    /// The longest a request may take, connection included.
    pub fn request_timeout(&self) -> std::time::Duration {
        self.request_timeout
    }

    /// The provider's bulkhead settings.
    pub fn limits(&self) -> crate::provider::limits::ProviderLimits {
        self.limits
    }

    /// The provider's configured name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The per-provider status overrides, for [`crate::provider::ClassifyContext`].
    pub fn status_overrides(&self) -> &BTreeMap<u16, AttemptClass> {
        &self.status_overrides
    }

    /// Sends one attempt and reports what was observed. Never retries, never follows a
    /// redirect; the caller classifies the observation.
    pub async fn send(&self, request: &DeliveryRequest) -> Observation {
        if let Some(segment) = dot_segment(&request.path) {
            return Observation::Refused {
                reason: format!(
                    "the path has a {segment:?} segment, which URL parsing would remove \
                     (a placeholder value of \".\" or \"..\")"
                ),
            };
        }
        let url = url_for(&self.base_url, &request.path);
        if !self.allow_private_addresses {
            if let Err(refused) = check_literal_host(&url) {
                return Observation::Refused {
                    reason: refused.to_string(),
                };
            }
        }
        let headers = match self.request_headers(request) {
            Ok(headers) => headers,
            Err(reason) => return Observation::Refused { reason },
        };
        let sent = self
            .http
            .request(request.method.clone(), url)
            .headers(headers)
            .body(request.body.clone())
            .send()
            .await;
        match sent {
            Ok(response) => observe_response(response, self.max_response_bytes).await,
            Err(error) => observe_send_error(&error),
        }
    }

    /// Content type, idempotency key, configured headers and the signature, if any.
    fn request_headers(&self, request: &DeliveryRequest) -> Result<HeaderMap, String> {
        let mut headers = self.extra_headers.clone();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let key = HeaderValue::from_str(&request.idempotency_key)
            .map_err(|_| "the idempotency key is not a valid HTTP header value".to_owned())?;
        headers.insert(self.idempotency_header.clone(), key.clone());
        if let Some(secret) = &self.signing_secret {
            let timestamp = chrono::Utc::now().timestamp();
            let signature =
                signing::sign(secret, &request.idempotency_key, timestamp, &request.body);
            headers.insert(WEBHOOK_ID_HEADER, key);
            headers.insert(WEBHOOK_TIMESTAMP_HEADER, HeaderValue::from(timestamp));
            let signature = HeaderValue::try_from(signature)
                .map_err(|_| "the signature is not a valid HTTP header value".to_owned())?;
            headers.insert(WEBHOOK_SIGNATURE_HEADER, signature);
        }
        Ok(headers)
    }
}

fn validate_base_url(url: &Url) -> Result<(), ProviderError> {
    let invalid = |reason| ProviderError::InvalidBaseUrl {
        url: url.to_string(),
        reason,
    };
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid("the scheme must be http or https"));
    }
    if url.host().is_none() {
        return Err(invalid("it has no host"));
    }
    if url.fragment().is_some() {
        return Err(invalid("it must not have a #fragment"));
    }
    Ok(())
}

fn parse_header_name(name: &str) -> Result<HeaderName, ProviderError> {
    HeaderName::try_from(name).map_err(|source| ProviderError::InvalidHeaderName {
        name: name.to_owned(),
        source,
    })
}

/// The configured headers, refusing any the client sets itself; values marked sensitive.
fn extra_headers(
    configured: &[(String, String)],
    idempotency_header: &HeaderName,
) -> Result<HeaderMap, ProviderError> {
    let reserved = [
        header::CONTENT_TYPE,
        header::CONTENT_LENGTH,
        header::TRANSFER_ENCODING,
        header::HOST,
        header::CONNECTION,
        HeaderName::from_static(WEBHOOK_ID_HEADER),
        HeaderName::from_static(WEBHOOK_TIMESTAMP_HEADER),
        HeaderName::from_static(WEBHOOK_SIGNATURE_HEADER),
        idempotency_header.clone(),
    ];
    let mut headers = HeaderMap::new();
    for (name, value) in configured {
        let header_name = parse_header_name(name)?;
        if reserved.contains(&header_name) {
            return Err(ProviderError::ReservedHeader { name: name.clone() });
        }
        let mut header_value =
            HeaderValue::from_str(value).map_err(|source| ProviderError::InvalidHeaderValue {
                name: name.clone(),
                source,
            })?;
        header_value.set_sensitive(true);
        headers.append(header_name, header_value);
    }
    Ok(headers)
}

/// The first segment of `path` (before any `?query`) that URL parsers treat as `.` or
/// `..` — also when percent-encoded (`%2E`, `.%2e`, ...) — and would collapse.
fn dot_segment(path: &str) -> Option<&str> {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    path.split(['/', '\\']).find(|segment| {
        let lower = segment.to_ascii_lowercase().replace("%2e", ".");
        lower == "." || lower == ".."
    })
}

/// `base` with `path` appended to its path (never replacing its host, unlike `Url::join`);
/// a `?query` in `path` is added to the base URL's query.
fn url_for(base: &Url, path: &str) -> Url {
    let (path, query) = match path.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (path, None),
    };
    let mut url = base.clone();
    let suffix = path.trim_start_matches('/');
    if !suffix.is_empty() {
        let joined = format!("{}/{suffix}", base.path().trim_end_matches('/'));
        url.set_path(&joined);
    }
    if let Some(query) = query.filter(|query| !query.is_empty()) {
        let combined = match base.query() {
            Some(existing) if !existing.is_empty() => format!("{existing}&{query}"),
            _ => query.to_owned(),
        };
        url.set_query(Some(&combined));
    }
    url
}
