//! The fake provider's shared state: [`Shared`] (options, records, faults, latency, the
//! rate limit, the wake-up for waiters) and the per-request critical section
//! ([`Shared::process`]), used by the connection tasks and the handle.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use chrono::Utc;
use tokio::sync::Notify;

use super::fault::{Fault, FaultPlan};
use super::http::Request;
use super::ledger::{Ledger, Reply, RequestRecord, Route};
use super::rate::RateWindow;

/// Everything under the one state lock.
#[derive(Debug, Default)]
pub(crate) struct State {
    /// Records and dedup state.
    pub(crate) ledger: Ledger,
    /// Scripted and random faults.
    pub(crate) faults: FaultPlan,
    /// The provider-side rate limit, if set (checked before any fault).
    pub(crate) rate: Option<RateWindow>,
}

/// State shared by the handle, the accept loop and every connection task.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The idempotency-key header name.
    pub(crate) header: String,
    /// Whether full request records are kept.
    pub(crate) record_requests: bool,
    /// Request head limit in bytes.
    pub(crate) max_head: usize,
    /// Request body limit in bytes.
    pub(crate) max_body: usize,
    state: Mutex<State>,
    /// Woken after every processed request.
    pub(crate) notify: Notify,
    latency_nanos: AtomicU64,
    /// Requests being handled now (read, waiting out the latency, answering).
    pub(crate) in_flight: std::sync::atomic::AtomicUsize,
    /// The most requests ever handled at once.
    pub(crate) max_in_flight: std::sync::atomic::AtomicUsize,
    /// Responses written out in full (the client may have read them).
    pub(crate) responses_written: std::sync::atomic::AtomicUsize,
}

impl Shared {
    /// Fresh state.
    pub(crate) fn new(
        header: String,
        record_requests: bool,
        max_head: usize,
        max_body: usize,
    ) -> Self {
        Shared {
            header,
            record_requests,
            max_head,
            max_body,
            state: Mutex::new(State::default()),
            notify: Notify::new(),
            latency_nanos: AtomicU64::new(0),
            in_flight: std::sync::atomic::AtomicUsize::new(0),
            max_in_flight: std::sync::atomic::AtomicUsize::new(0),
            responses_written: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// The state lock (a panic elsewhere never makes the records unreadable).
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The artificial delay before each request is processed.
    pub(crate) fn latency(&self) -> Duration {
        Duration::from_nanos(self.latency_nanos.load(Ordering::Relaxed))
    }

    /// Sets the artificial delay (saturating at ~584 years).
    pub(crate) fn set_latency(&self, latency: Duration) {
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.latency_nanos.store(nanos, Ordering::Relaxed);
    }

    /// The request's idempotency key: the configured header, if present, non-empty UTF-8.
    pub(crate) fn key_of<'r>(&self, request: &'r Request) -> Option<&'r str> {
        let raw = request.header(&self.header)?;
        std::str::from_utf8(raw).ok().filter(|k| !k.is_empty())
    }

    /// Counts and records the request, picks its fault and applies the endpoint (unless the
    /// fault skips processing), all in one short critical section; then wakes waiters.
    pub(crate) fn process(&self, request: &Request) -> (Reply, Option<Fault>) {
        let key = self.key_of(request);
        let target = request.target();
        let route = Route::of(request.method(), target);
        let at = Utc::now();
        let body = request.body();
        // Allocate the record before taking the lock.
        let mut record = self.record_requests.then(|| RequestRecord {
            seq: 0,
            method: request.method().to_owned(),
            path: target.to_owned(),
            idempotency_key: key.map(str::to_owned),
            headers: request.headers_lowercased(),
            body: body.clone(),
            fault: None,
            at,
        });
        let mut state = self.lock();
        let seq = state.ledger.begin_request(key);
        let limited = state
            .rate
            .as_mut()
            .is_some_and(|r| !r.admit(std::time::Instant::now()));
        let fault = if limited {
            Some(Fault::StatusWithoutApply {
                status: 429,
                retry_after: Some("1".to_owned()),
            })
        } else {
            state.faults.select(target, key)
        };
        let reply = match &fault {
            Some(f) if !f.applies() => Reply::Skipped,
            _ => state.ledger.apply(route, key, target, &body, at),
        };
        if let Some(mut record) = record.take() {
            record.seq = seq;
            record.fault = fault.as_ref().map(Fault::kind);
            state.ledger.push_request(record);
        }
        drop(state);
        self.notify.notify_waiters();
        (reply, fault)
    }
}
