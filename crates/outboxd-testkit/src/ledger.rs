//! What the fake provider remembers: every request ([`RequestRecord`]), every effect
//! ([`Effect`]) and, per idempotency key, the reference of its one keyed effect — for
//! ever, or (with a key expiry, like a real provider's key retention) until the key is
//! that old, after which a request with it applies a second effect. The
//! [`Ledger`] lives under the provider's state lock; the endpoint semantics (dedup by key,
//! apply every time, lookup) are decided here and rendered elsewhere.

use std::collections::HashMap;

use bytes::Bytes;
use chrono::{DateTime, Utc};

use super::fault::FaultKind;

/// One request the provider received (complete and well-formed enough to be routed).
#[derive(Debug, Clone, PartialEq)]
pub struct RequestRecord {
    /// 1-based arrival order across all connections.
    pub seq: u64,
    /// The request method as sent (`POST`).
    pub method: String,
    /// The request target as sent, including any query string.
    pub path: String,
    /// The value of the configured idempotency-key header, if present.
    pub idempotency_key: Option<String>,
    /// All headers in order, names lowercased, values as (lossy UTF-8) text.
    pub headers: Vec<(String, String)>,
    /// The request body.
    pub body: Bytes,
    /// The fault injected into this request's response, if any.
    pub fault: Option<FaultKind>,
    /// When the request was processed.
    pub at: DateTime<Utc>,
}

impl RequestRecord {
    /// The first header with this (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One effect the provider applied (the thing a real provider would do: refund, create, send).
#[derive(Debug, Clone, PartialEq)]
pub struct Effect {
    /// The idempotency key the request carried, if any (also recorded for unkeyed endpoints).
    pub key: Option<String>,
    /// The provider reference assigned, `ref_<n>`.
    pub reference: String,
    /// The request target that caused it.
    pub path: String,
    /// The request body.
    pub body: Bytes,
    /// When it was applied.
    pub at: DateTime<Utc>,
}

impl Effect {
    /// The body parsed as JSON, if it is JSON.
    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.body).ok()
    }
}

/// Which endpoint a request addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route<'a> {
    /// `POST /keyed/...`: at most one effect per key.
    Keyed,
    /// `POST /unkeyed/...`: an effect per request.
    Unkeyed,
    /// `GET /lookup/<key>` (the key still percent-encoded).
    Lookup(&'a str),
    /// Anything else.
    NotFound,
}

impl<'a> Route<'a> {
    /// Routes on method and path (the target without its query string).
    pub(crate) fn of(method: &str, target: &'a str) -> Self {
        let path = target.split_once('?').map_or(target, |(p, _)| p);
        match method {
            "POST" if path.starts_with("/keyed/") => Route::Keyed,
            "POST" if path.starts_with("/unkeyed/") => Route::Unkeyed,
            "GET" => match path.strip_prefix("/lookup/") {
                Some(key) if !key.is_empty() => Route::Lookup(key),
                _ => Route::NotFound,
            },
            _ => Route::NotFound,
        }
    }
}

/// What the endpoint decided; rendered to JSON outside the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reply {
    /// An effect exists for the request: `ref_<reference>`, and whether it was a replay.
    Applied { reference: u64, replayed: bool },
    /// Lookup hit.
    Found { reference: u64 },
    /// Unknown route, or lookup miss.
    NotFound,
    /// `POST /keyed/...` without the idempotency-key header.
    MissingKey,
    /// The lookup key is not valid percent-encoded UTF-8.
    BadLookupKey,
    /// A "without apply" fault answers instead; nothing was processed.
    Skipped,
}

#[derive(Debug, Default)]
struct KeyEntry {
    /// Number of the keyed effect, once applied.
    reference: Option<u64>,
    /// When the keyed effect was applied (its key expires from then).
    applied_at: Option<DateTime<Utc>>,
    /// Requests (any endpoint) that carried this key.
    requests: usize,
}

/// Records and dedup state of one provider.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    requests: Vec<RequestRecord>,
    request_total: usize,
    effects: Vec<Effect>,
    keys: HashMap<String, KeyEntry>,
    /// How long a keyed effect's key is remembered (`None`: for ever).
    key_expiry: Option<chrono::Duration>,
}

impl Ledger {
    /// Counts a request (and its key) and returns its sequence number.
    pub(crate) fn begin_request(&mut self, key: Option<&str>) -> u64 {
        self.request_total += 1;
        if let Some(k) = key {
            match self.keys.get_mut(k) {
                Some(entry) => entry.requests += 1,
                None => {
                    let entry = KeyEntry {
                        reference: None,
                        applied_at: None,
                        requests: 1,
                    };
                    self.keys.insert(k.to_owned(), entry);
                }
            }
        }
        self.request_total as u64
    }

    /// Forgets keyed effects once their key is `expiry` old (`None`: remembers for ever).
    pub(crate) fn set_key_expiry(&mut self, expiry: Option<chrono::Duration>) {
        self.key_expiry = expiry;
    }

    /// The keyed effect still remembered for `key` at `at`.
    fn remembered(&self, key: &str, at: DateTime<Utc>) -> Option<u64> {
        let entry = self.keys.get(key)?;
        let reference = entry.reference?;
        match (self.key_expiry, entry.applied_at) {
            (Some(expiry), Some(applied)) if at - applied >= expiry => None,
            _ => Some(reference),
        }
    }

    /// Stores a request record (only when recording is enabled).
    pub(crate) fn push_request(&mut self, record: RequestRecord) {
        self.requests.push(record);
    }

    /// Applies the endpoint's semantics for one request.
    pub(crate) fn apply(
        &mut self,
        route: Route<'_>,
        key: Option<&str>,
        target: &str,
        body: &Bytes,
        at: DateTime<Utc>,
    ) -> Reply {
        match route {
            Route::Keyed => match key {
                None => Reply::MissingKey,
                Some(k) => self.apply_keyed(k, target, body, at),
            },
            Route::Unkeyed => Reply::Applied {
                reference: self.new_effect(key, target, body, at),
                replayed: false,
            },
            Route::Lookup(raw) => match percent_decode(raw) {
                None => Reply::BadLookupKey,
                Some(k) => match self.remembered(&k, at) {
                    Some(reference) => Reply::Found { reference },
                    None => Reply::NotFound,
                },
            },
            Route::NotFound => Reply::NotFound,
        }
    }

    fn apply_keyed(&mut self, key: &str, target: &str, body: &Bytes, at: DateTime<Utc>) -> Reply {
        if let Some(reference) = self.remembered(key, at) {
            return Reply::Applied {
                reference,
                replayed: true,
            };
        }
        let reference = self.new_effect(Some(key), target, body, at);
        let entry = self.keys.entry(key.to_owned()).or_default();
        entry.reference = Some(reference);
        entry.applied_at = Some(at);
        Reply::Applied {
            reference,
            replayed: false,
        }
    }

    fn new_effect(
        &mut self,
        key: Option<&str>,
        target: &str,
        body: &Bytes,
        at: DateTime<Utc>,
    ) -> u64 {
        let n = self.effects.len() as u64 + 1;
        self.effects.push(Effect {
            key: key.map(str::to_owned),
            reference: format!("ref_{n}"),
            path: target.to_owned(),
            body: body.clone(),
            at,
        });
        n
    }

    /// All recorded requests.
    pub(crate) fn requests(&self) -> &[RequestRecord] {
        &self.requests
    }

    /// Requests received so far (recorded or not).
    pub(crate) fn request_total(&self) -> usize {
        self.request_total
    }

    /// All effects.
    pub(crate) fn effects(&self) -> &[Effect] {
        &self.effects
    }

    /// Requests that carried this key.
    pub(crate) fn request_count_for_key(&self, key: &str) -> usize {
        self.keys.get(key).map_or(0, |e| e.requests)
    }

    /// The reference of the keyed effect for this key.
    pub(crate) fn reference_for_key(&self, key: &str) -> Option<String> {
        let n = self.keys.get(key)?.reference?;
        Some(format!("ref_{n}"))
    }
}

/// Decodes `%XX` escapes (and nothing else); `None` if malformed or not UTF-8.
pub(crate) fn percent_decode(raw: &str) -> Option<String> {
    if !raw.contains('%') {
        return Some(raw.to_owned());
    }
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}
