//! A fake HTTP provider on loopback for integration tests, `outboxd demo` and benchmarks.
//!
//! [`FakeProvider`] is a small, real HTTP/1.1 server (raw `tokio` sockets, keep-alive,
//! `Content-Length` bodies) that **records effects per idempotency key** and **injects
//! faults exactly**: a silent close, a TCP reset, a late answer, a wrong status, a huge or
//! endless body, a redirect, refused connections, 429s above a request rate.
//!
//! Endpoints (the idempotency-key header name is configurable, default `Idempotency-Key`):
//!
//! * `POST /keyed/<anything>` — at most one effect per key while the key is remembered
//!   (for ever, or for [`FakeProvider::set_key_expiry`]); a repeat answers with the same
//!   reference and `"replayed":true`. Missing key → 400.
//! * `POST /unkeyed/<anything>` — an effect for every request (a provider without dedup).
//! * `GET /lookup/<key>` — `{"id":"ref_n"}` if the key has a keyed effect, else 404.
//! * anything else — 404 `{"error":"not_found"}`.
//!
//! Success body: `{"id":"ref_<n>","idempotency_key":<key or null>,"replayed":<bool>}`, where
//! `n` counts effects from 1. Faults are scripted ([`FakeProvider::push_fault`]) or seeded
//! random ([`FakeProvider::set_random_faults`]); see [`Fault`] for the catalogue.
//!
//! Files: `handle` (the public handle), `fault` (faults, rules, random mode), `ledger`
//! (records, dedup), `parse` and `http` (request reading), `response` (wire format),
//! `rate` (a provider-side rate limit answering 429), `connection` (one client, fault execution), `server` (shared state, accept loop).

mod connection;
mod fault;
mod handle;
mod http;
mod ledger;
mod parse;
mod rate;
mod response;
mod server;
mod shared;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_faults;
#[cfg(test)]
mod tests_http;
#[cfg(test)]
mod tests_modes;

pub use fault::{Fault, FaultKind, FaultRule, Matcher, RandomFaults};
pub use handle::FakeProvider;
pub use ledger::{Effect, RequestRecord};

/// The most body bytes [`Fault::EndlessBodyAfterApply`] sends before ending the body (1 GiB).
pub const ENDLESS_BODY_LIMIT: u64 = 1 << 30;

/// How to start a [`FakeProvider`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeProviderOptions {
    /// Port on 127.0.0.1; 0 (the default) picks a free one.
    pub port: u16,
    /// The idempotency-key request header (matched case-insensitively).
    pub idempotency_header: String,
    /// Largest accepted request head (request line and headers); larger → 431.
    pub max_header_bytes: usize,
    /// Largest accepted request body; larger → 413.
    pub max_body_bytes: usize,
    /// Keep a full [`RequestRecord`] of every request. Turn off for long benchmarks: counts,
    /// per-key counts and effects are kept either way.
    pub record_requests: bool,
}

impl Default for FakeProviderOptions {
    fn default() -> Self {
        FakeProviderOptions {
            port: 0,
            idempotency_header: "Idempotency-Key".to_owned(),
            max_header_bytes: 64 * 1024,
            max_body_bytes: 1024 * 1024,
            record_requests: true,
        }
    }
}
