//! The invariant checker: compares the fake provider's effect and request logs with the
//! outbox after any run and counts what must be zero. Used by the test suites, the demo
//! and the soak runs.
//!
//! * **lost** — an intent marked delivered with no effect at the provider, or (for a run
//!   expected to be settled) still pending or in flight;
//! * **unexpected** — an effect whose idempotency key belongs to no intent;
//! * **duplicated** — two effects for one key, or, for a `not_idempotent` action, a second
//!   request after one that may have applied (anything but a "did not apply" answer);
//! * **unaccounted ambiguous** — an intent with an ambiguous attempt that is neither
//!   delivered, nor retried under a key the provider honours, nor in reconciliation;
//! * **reference mismatches** — a stored provider reference that differs from the provider's;
//! * **stale leases** — in flight with an expired lease when the run should be settled.

use std::collections::{BTreeSet, HashMap};
use std::fmt;

use chrono::Utc;
use serde::Serialize;

use crate::action::RetrySafety;
use crate::dispatch::ActionTable;
use crate::fake_provider::{FakeProvider, FaultKind};
use crate::intent::IntentState;
use crate::store::{IntentFilter, IntentRow, OutboxStore, StoreError};

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
        write!(f, "committed={} effects={} requests={} delivered={} failed={} unknown={} | lost={} unexpected={} duplicated={} unaccounted_ambiguous={} reference_mismatches={} stale_leases={}",
            self.committed, self.effects, self.requests, self.delivered, self.failed, self.unknown,
            self.lost, self.unexpected, self.duplicated, self.unaccounted_ambiguous,
            self.reference_mismatches, self.stale_leases)?;
        for v in &self.violations {
            write!(f, "\n  violation: {v}")?;
        }
        Ok(())
    }
}

async fn all_intents(store: &dyn OutboxStore) -> Result<Vec<IntentRow>, StoreError> {
    let mut out = Vec::new();
    loop {
        let page = store
            .list_intents(&IntentFilter {
                after_id: out.last().map(|i: &IntentRow| i.id),
                limit: 1000,
                ..IntentFilter::default()
            })
            .await?;
        let done = page.len() < 1000;
        out.extend(page);
        if done {
            return Ok(out);
        }
    }
}

/// Requests that may have applied: every answer except "did not apply".
fn may_have_applied(fault: Option<FaultKind>) -> bool {
    !matches!(
        fault,
        Some(FaultKind::StatusWithoutApply | FaultKind::RedirectWithoutApply)
    )
}

/// Checks the outbox against the provider. With `settled`, anything still pending or in
/// flight counts as lost and an expired lease as stale.
pub async fn check(
    store: &dyn OutboxStore,
    provider: &FakeProvider,
    actions: &ActionTable,
    settled: bool,
) -> Result<CheckReport, StoreError> {
    let intents = all_intents(store).await?;
    let open: BTreeSet<i64> = store
        .open_reconciliation_intents()
        .await?
        .into_iter()
        .collect();
    let effects = provider.effects();
    let requests = provider.requests();
    let mut effects_by_key: HashMap<&str, Vec<&str>> = HashMap::new();
    for e in &effects {
        if let Some(k) = &e.key {
            effects_by_key.entry(k).or_default().push(&e.reference);
        }
    }
    let mut applying_requests: HashMap<&str, usize> = HashMap::new();
    // Status lookups (`GET /lookup/<key>`, sent by probes with the key header) apply nothing.
    let lookup = |method: &str| matches!(method, "GET" | "HEAD");
    for r in &requests {
        if let (Some(k), true) = (
            &r.idempotency_key,
            may_have_applied(r.fault) && !lookup(&r.method),
        ) {
            *applying_requests.entry(k).or_default() += 1;
        }
    }
    let mut report = CheckReport {
        committed: intents.len(),
        effects: effects.len(),
        requests: provider.request_count(),
        ..CheckReport::default()
    };
    let keys: BTreeSet<&str> = intents.iter().map(|i| i.idempotency_key.as_str()).collect();
    for e in &effects {
        if !e.key.as_deref().is_some_and(|k| keys.contains(k)) {
            report.unexpected += 1;
            report.violation(format!(
                "effect {} has no intent (key {:?})",
                e.reference, e.key
            ));
        }
    }
    let now = Utc::now();
    for intent in &intents {
        let safety = actions.get(&intent.action).map(|a| a.retry_safety);
        check_intent(
            &mut report,
            intent,
            safety,
            &effects_by_key,
            &applying_requests,
            &open,
            settled,
            now,
        );
    }
    Ok(report)
}

#[allow(clippy::too_many_arguments)]
fn check_intent(
    report: &mut CheckReport,
    intent: &IntentRow,
    safety: Option<RetrySafety>,
    effects_by_key: &HashMap<&str, Vec<&str>>,
    applying_requests: &HashMap<&str, usize>,
    open: &BTreeSet<i64>,
    settled: bool,
    now: chrono::DateTime<Utc>,
) {
    let key = intent.idempotency_key.as_str();
    let refs = effects_by_key.get(key).map(Vec::as_slice).unwrap_or(&[]);
    let id = intent.id;
    match intent.state {
        IntentState::Delivered => report.delivered += 1,
        IntentState::Failed => report.failed += 1,
        IntentState::Unknown => report.unknown += 1,
        _ => {}
    }
    if refs.len() > 1 {
        report.duplicated += 1;
        report.violation(format!("intent {id}: {} effects for key {key}", refs.len()));
    }
    if safety == Some(RetrySafety::NotIdempotent)
        && applying_requests.get(key).copied().unwrap_or(0) > 1
    {
        report.duplicated += 1;
        report.violation(format!(
            "intent {id}: not_idempotent action resent after a request that may have applied"
        ));
    }
    if intent.state == IntentState::Delivered {
        match (refs.first(), intent.provider_ref.as_deref()) {
            (None, _) => {
                report.lost += 1;
                report.violation(format!(
                    "intent {id}: delivered but the provider has no effect"
                ));
            }
            (Some(r), Some(stored)) if *r != stored => {
                report.reference_mismatches += 1;
                report.violation(format!(
                    "intent {id}: stored reference {stored}, provider has {r}"
                ));
            }
            _ => {}
        }
    }
    let unsettled = matches!(intent.state, IntentState::Pending | IntentState::InFlight);
    if settled && unsettled {
        report.lost += 1;
        report.violation(format!("intent {id}: still {} after the run", intent.state));
    }
    if settled
        && intent.state == IntentState::InFlight
        && intent.lease_expires_at.is_some_and(|t| t < now)
    {
        report.stale_leases += 1;
    }
    if intent.ambiguous_attempts > 0 {
        let accounted = match intent.state {
            IntentState::Delivered | IntentState::Abandoned => true,
            IntentState::Unknown => open.contains(&id),
            IntentState::Pending | IntentState::InFlight => {
                safety != Some(RetrySafety::NotIdempotent) || !settled
            }
            IntentState::Failed | IntentState::Cancelled => false,
        };
        if !accounted {
            report.unaccounted_ambiguous += 1;
            report.violation(format!(
                "intent {id}: ambiguous attempt but state {}",
                intent.state
            ));
        }
    }
}
