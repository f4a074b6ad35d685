//! The invariant checker: compares the fake provider's effect and request logs with the
//! outbox after any run and counts what must be zero. Used by the test suites, the demo
//! and the soak runs.
//!
//! Every count is derived from **evidence the dispatcher did not write**: the provider's
//! effect log (what it did, per idempotency key) and request log (what it received and
//! which answers it broke), set against the intents' recorded states and references. The
//! dispatcher's own bookkeeping (`ambiguous_attempts`) is only ever an extra way to fail.
//!
//! * **lost** — an intent marked delivered with no effect at the provider, or (for a run
//!   expected to be settled) still pending or in flight;
//! * **unexpected** — an effect whose idempotency key belongs to no intent;
//! * **duplicated** — two effects for one key, or, for a `not_idempotent` action, any
//!   request after one that may have applied (anything but a "did not apply" answer);
//! * **unaccounted ambiguous** — an intent the provider acted on (an effect exists for its
//!   key) that is neither delivered, nor in reconciliation, nor resolved by a person, nor
//!   (while the run is unsettled) awaiting a retry under a key the provider honours — e.g.
//!   a "500 after apply" recorded as `failed`; also an intent the dispatcher itself counted
//!   ambiguous that ended `failed` or `cancelled`;
//! * **reference mismatches** — a delivered intent without a provider reference, or with
//!   one that differs from the provider's;
//! * **unattributed requests** — more requests for a key than attempts its intent started;
//! * **stale leases** — in flight with an expired lease when the run should be settled.
//!
//! Files: this one (the report and [`check`]), `evidence` (gathering and the rules, a pure
//! function of the evidence so a test can mutate a copy of real run data).

mod evidence;

use std::fmt;

use chrono::Utc;
use serde::Serialize;

use crate::dispatch::ActionTable;
use crate::fake_provider::FakeProvider;
use crate::store::{ReadStore, StoreError};

pub use evidence::Evidence;

/// The checker's counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CheckReport {
    /// Intents in the outbox.
    pub committed: usize,
    /// Effects at the provider.
    pub effects: usize,
    /// Requests the provider received.
    pub requests: usize,
    /// Intents delivered.
    pub delivered: usize,
    /// Intents failed.
    pub failed: usize,
    /// Intents in reconciliation (unknown).
    pub unknown: usize,
    /// Intents whose requests got at least one answer the provider broke after applying
    /// (per the provider's request log, not the dispatcher's classification).
    pub ambiguous: usize,
    /// Must be zero: see the module docs.
    pub lost: usize,
    /// Must be zero.
    pub unexpected: usize,
    /// Must be zero.
    pub duplicated: usize,
    /// Must be zero.
    pub unaccounted_ambiguous: usize,
    /// Must be zero.
    pub reference_mismatches: usize,
    /// Must be zero.
    pub unattributed_requests: usize,
    /// Must be zero.
    pub stale_leases: usize,
    /// Human-readable details of each violation (at most 20).
    pub violations: Vec<String>,
}

impl CheckReport {
    /// Whether every must-be-zero count is zero.
    pub fn is_clean(&self) -> bool {
        self.lost
            + self.unexpected
            + self.duplicated
            + self.unaccounted_ambiguous
            + self.reference_mismatches
            + self.unattributed_requests
            + self.stale_leases
            == 0
    }

    fn violation(&mut self, text: String) {
        if self.violations.len() < 20 {
            self.violations.push(text);
        }
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "committed={} effects={} requests={} delivered={} failed={} unknown={} ambiguous={} | lost={} unexpected={} duplicated={} unaccounted_ambiguous={} reference_mismatches={} unattributed_requests={} stale_leases={}",
            self.committed, self.effects, self.requests, self.delivered, self.failed, self.unknown,
            self.ambiguous, self.lost, self.unexpected, self.duplicated, self.unaccounted_ambiguous,
            self.reference_mismatches, self.unattributed_requests, self.stale_leases)?;
        for v in &self.violations {
            write!(f, "\n  violation: {v}")?;
        }
        Ok(())
    }
}

/// Checks the outbox against the provider. With `settled`, anything still pending or in
/// flight counts as lost and an expired lease as stale.
pub async fn check(
    store: &(impl ReadStore + ?Sized),
    provider: &FakeProvider,
    actions: &ActionTable,
    settled: bool,
) -> Result<CheckReport, StoreError> {
    let evidence = Evidence::gather(store, provider, actions).await?;
    Ok(evidence.evaluate(settled, Utc::now()))
}
