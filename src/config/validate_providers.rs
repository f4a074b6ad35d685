//! Validation of `[providers.*]`: base URLs, the idempotency header, status overrides,
//! extra headers, signing secrets, and the check that a request fits inside the lease.

use reqwest::header::{HeaderName, HeaderValue};

use super::lease::{shortest_lease, SEND_MARGIN};
use super::provider::{decode_signing_secret, ProviderConfig};
use super::report::{human, Report};
use super::Config;
use crate::intent::ActionName;

/// The largest `max_response_bytes` accepted: a response is buffered whole, once per
/// request in flight.
pub(crate) const MAX_RESPONSE_BYTES_LIMIT: u64 = 64 * 1024 * 1024;

/// Headers the HTTP client or outboxd itself sets; they cannot be configured.
const RESERVED_HEADERS: [&str; 5] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "content-type",
];

/// Validates every provider.
pub(crate) fn validate_providers(config: &Config, report: &mut Report<'_>) {
    for (name, provider) in &config.providers {
        let key = format!("providers.{name}");
        if let Err(e) = ActionName::parse(name.clone()) {
            report.error(key.clone(), format!("provider name {name:?} {}", e.reason));
        }
        check_base_url(&key, &provider.base_url, report);
        report.positive(&format!("{key}.connect_timeout"), provider.connect_timeout);
        report.positive(&format!("{key}.request_timeout"), provider.request_timeout);
        report.positive(&format!("{key}.key_retention"), provider.key_retention);
        if provider.max_response_bytes == 0 {
            report.error(format!("{key}.max_response_bytes"), "must be at least 1");
        } else if provider.max_response_bytes > MAX_RESPONSE_BYTES_LIMIT {
            report.error(
                format!("{key}.max_response_bytes"),
                format!(
                    "is {}; it must be at most {MAX_RESPONSE_BYTES_LIMIT} (64 MiB): every \
                     request in flight may hold a response this large",
                    provider.max_response_bytes
                ),
            );
        }
        if provider.max_in_flight == Some(0) {
            report.error(format!("{key}.max_in_flight"), "must be at least 1");
        }
        if let Some(rate) = provider.rate_limit {
            if rate.per_second == 0 || rate.burst == 0 {
                report.error(
                    format!("{key}.rate_limit"),
                    "per_second and burst must be at least 1",
                );
            }
        }
        if provider.breaker_failures > 0 {
            report.positive(
                &format!("{key}.breaker_cooldown"),
                provider.breaker_cooldown,
            );
        }
        if HeaderName::from_bytes(provider.idempotency_header.as_bytes()).is_err() {
            report.error(
                format!("{key}.idempotency_header"),
                format!(
                    "{:?} is not a valid HTTP header name",
                    provider.idempotency_header
                ),
            );
        }
        check_status_overrides(&key, provider, report);
        check_headers(&key, provider, report);
        check_signing(&key, provider, report);
        check_lease(&key, provider, config, report);
        if !config.actions.values().any(|a| &a.provider == name) {
            report.warn(key, "no action uses this provider");
        }
    }
}

fn check_base_url(key: &str, base_url: &str, report: &mut Report<'_>) {
    let key = format!("{key}.base_url");
    if base_url.is_empty() {
        report.error(key, "is required");
        return;
    }
    let url = match url::Url::parse(base_url) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => url,
        _ => {
            report.error(
                key,
                format!("{base_url:?} is not a valid http:// or https:// URL"),
            );
            return;
        }
    };
    if url.query().is_some() || url.fragment().is_some() {
        report.error(
            key.clone(),
            format!("{base_url:?} must not have a query or fragment; put those in the action path"),
        );
    }
    if !url.username().is_empty() || url.password().is_some() {
        report.error(
            key.clone(),
            "must not carry credentials; use [headers] with value_env or value_file",
        );
    }
    let local = matches!(url.host_str(), Some("localhost" | "127.0.0.1" | "[::1]"));
    if url.scheme() == "http" && !local {
        report.warn(
            key,
            "uses plain http; payloads and credentials travel unencrypted",
        );
    }
}

fn check_status_overrides(key: &str, provider: &ProviderConfig, report: &mut Report<'_>) {
    for status in provider.status_overrides.keys() {
        match status.parse::<u16>() {
            Ok(code) if (100..=599).contains(&code) => {}
            _ => report.error(
                format!("{key}.status_overrides.{status}"),
                format!("{status:?} is not an HTTP status between 100 and 599"),
            ),
        }
    }
}

fn check_headers(key: &str, provider: &ProviderConfig, report: &mut Report<'_>) {
    let mut seen = std::collections::BTreeMap::new();
    for (name, value) in &provider.headers {
        let header_key = format!("{key}.headers.{name}");
        if let Some(first) = seen.insert(name.to_ascii_lowercase(), name) {
            report.error(
                header_key.clone(),
                format!(
                    "repeats header {first:?} (names are case-insensitive; environment \
                     overrides are lower case, so write the name in lower case to override it)"
                ),
            );
        }
        if HeaderName::from_bytes(name.as_bytes()).is_err() {
            report.error(
                header_key.clone(),
                format!("{name:?} is not a valid HTTP header name"),
            );
        }
        let lower = name.to_ascii_lowercase();
        if lower == provider.idempotency_header.to_ascii_lowercase() {
            report.error(
                header_key.clone(),
                "is the idempotency header; outboxd sets it per intent",
            );
        } else if RESERVED_HEADERS.contains(&lower.as_str()) {
            report.error(
                header_key.clone(),
                "is set by outboxd or the HTTP client and cannot be configured",
            );
        }
        if let Some(v) = &value.value {
            if HeaderValue::from_str(v.expose()).is_err() {
                report.error(
                    header_key,
                    "value is not a valid HTTP header value (visible ASCII only, no newlines)",
                );
            }
        }
    }
}

fn check_signing(key: &str, provider: &ProviderConfig, report: &mut Report<'_>) {
    let Some(secret) = provider.signing.as_ref().and_then(|s| s.secret.as_ref()) else {
        return;
    };
    if let Err(why) = decode_signing_secret(secret.expose()) {
        report.error(
            format!("{key}.signing.secret"),
            format!("the signing secret {why}"),
        );
    }
}

/// A request is sent only while its lease covers the request timeout plus
/// [`SEND_MARGIN`] ([`shortest_lease`]); a shorter lease would never send anything.
fn check_lease(key: &str, provider: &ProviderConfig, config: &Config, report: &mut Report<'_>) {
    let needed = shortest_lease(provider.request_timeout);
    let lease = config.dispatcher.lease;
    if lease < needed {
        report.error(
            format!("{key}.request_timeout"),
            format!(
                "{} plus the {} send margin ({}) is longer than dispatcher.lease ({}): a \
                 request is sent only while its lease still covers its whole timeout and the \
                 time to record its outcome, so nothing would ever be sent; raise \
                 dispatcher.lease or lower the timeout",
                human(provider.request_timeout),
                human(SEND_MARGIN),
                human(needed),
                human(lease)
            ),
        );
    }
}
