//! The dispatcher step and the daemon loop around it.
//!
//! [`Dispatcher::run_once`] is one testable step: take over expired leases, claim a batch,
//! deliver it with bounded concurrency, record every outcome fenced. [`Dispatcher::run`]
//! only decides how long to wait between steps and how to stop: on shutdown it stops
//! claiming, lets in-flight attempts finish within the grace period, and hands back claims
//! whose request was never sent.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use futures_util::stream::{self, StreamExt};
use tokio::sync::Mutex;

use super::actions::ActionTable;
use super::{attempt, lease};
use crate::metrics::Metrics;
use crate::store::{
    ClaimRequest, ClaimStore, ClaimedIntent, OutcomeRecord, RecordResult, Release, StoreError,
    Transition,
};

/// How long one outcome write may go unanswered before it is abandoned and retried.
pub const OUTCOME_WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// How a dispatcher claims and paces work.
#[derive(Debug, Clone)]
pub struct DispatcherSettings {
    /// Lease owner name (unique per process: host and pid by default).
    pub owner: String,
    /// Intents claimed per step.
    pub batch_size: u32,
    /// Deliveries in flight at once.
    pub concurrency: usize,
    /// Lease length; at least the longest request timeout plus [`lease::SEND_MARGIN`]: a
    /// request is sent only while its lease still covers both.
    pub lease: Duration,
    /// Longest idle wait between steps (the polling fallback).
    pub poll_interval: Duration,
    /// How long in-flight attempts may finish after a shutdown signal.
    pub shutdown_grace: Duration,
    /// How often the daemon loop looks for expired leases to take over
    /// ([`Dispatcher::run_once`] always does).
    pub reclaim_every: Duration,
}

/// What one step did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepReport {
    /// Expired leases taken over.
    pub reclaimed: usize,
    /// Intents claimed for delivery.
    pub claimed: usize,
    /// Outcomes recorded as delivered.
    pub delivered: usize,
    /// Outcomes scheduled for a retry.
    pub retried: usize,
    /// Outcomes recorded as failed.
    pub failed: usize,
    /// Outcomes sent to reconciliation.
    pub unknown: usize,
    /// Outcomes not written because the lease was lost.
    pub fenced: usize,
    /// Claims handed back unsent (shutdown).
    pub released: usize,
}

impl StepReport {
    /// Whether the step found anything to do.
    pub fn did_work(&self) -> bool {
        self.reclaimed + self.claimed > 0
    }

    fn add(&mut self, other: &StepReport) {
        self.reclaimed += other.reclaimed;
        self.claimed += other.claimed;
        self.delivered += other.delivered;
        self.retried += other.retried;
        self.failed += other.failed;
        self.unknown += other.unknown;
        self.fenced += other.fenced;
        self.released += other.released;
    }
}

/// Either an outcome to record or a claim to hand back.
pub(super) enum Finished {
    Outcome(OutcomeRecord),
    Release(Release),
}

impl Finished {
    /// `intent` handed back unsent, fenced by its claim, for `reason`.
    pub(super) fn handed_back(intent: &ClaimedIntent, reason: impl Into<String>) -> Finished {
        Finished::Release(Release {
            intent_id: intent.id,
            fencing_token: intent.fencing_token,
            reason: reason.into(),
        })
    }
}

/// Claims, delivers and records intents for the configured actions.
pub struct Dispatcher {
    pub(super) store: Arc<dyn ClaimStore>,
    pub(super) actions: Arc<ActionTable>,
    pub(super) settings: DispatcherSettings,
    pub(super) stopping: AtomicBool,
    pub(super) unconfigured_logged: Mutex<BTreeSet<String>>,
    pub(super) metrics: Option<Arc<Metrics>>,
    /// Where [`Dispatcher::run_once`]'s claims are in the tenants' turn.
    turns: std::sync::Mutex<super::fairness::TenantTurns>,
    /// The pipeline's provider bulkheads while [`Dispatcher::run`] runs (for status).
    pub(super) provider_states: std::sync::Mutex<Option<super::lanes::Lanes>>,
}

impl Dispatcher {
    /// A dispatcher over `store` for the actions in `actions`.
    pub fn new(
        store: Arc<dyn ClaimStore>,
        actions: Arc<ActionTable>,
        settings: DispatcherSettings,
    ) -> Self {
        Self {
            store,
            actions,
            settings,
            stopping: AtomicBool::new(false),
            unconfigured_logged: Mutex::new(BTreeSet::new()),
            metrics: None,
            turns: std::sync::Mutex::new(super::fairness::TenantTurns::new()),
            provider_states: std::sync::Mutex::new(None),
        }
    }

    /// Reports attempts, claims and lease expiries to `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The settings in use.
    pub fn settings(&self) -> &DispatcherSettings {
        &self.settings
    }

    /// A claim request. At most `concurrency` intents are claimed per step so that every
    /// claimed request starts at once: the lease then only has to cover one request
    /// (connect + request timeout), never a queue of them.
    pub(super) fn request(&self) -> ClaimRequest {
        let limit = self
            .settings
            .batch_size
            .min(u32::try_from(self.settings.concurrency).unwrap_or(u32::MAX))
            .max(1);
        ClaimRequest {
            owner: self.settings.owner.clone(),
            lease: self.settings.lease,
            limit,
            actions: self.actions.names(),
            now: Utc::now(),
        }
    }

    /// Whether a shutdown signal has been seen (no new request starts any more).
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// One step: take over expired leases, claim a batch, deliver it, record the outcomes.
    pub async fn run_once(&self) -> Result<StepReport, StoreError> {
        self.step(true).await
    }

    /// One step without the takeover of expired leases: claim a batch, deliver it, record
    /// the outcomes (what the daemon loop does between its periodic takeovers).
    pub async fn claim_and_deliver(&self) -> Result<StepReport, StoreError> {
        self.step(false).await
    }

    /// One step, taking over expired leases first only when `reclaim` is set (the daemon
    /// loop does that every `reclaim_every`, not on every step).
    pub(super) async fn step(&self, reclaim: bool) -> Result<StepReport, StoreError> {
        let mut report = StepReport::default();
        let expired = if reclaim {
            self.store.reclaim_expired(&self.request()).await?
        } else {
            Vec::new()
        };
        report.reclaimed = expired.len();
        if let Some(m) = &self.metrics {
            m.observe_lease_expiries(expired.len());
        }
        if !expired.is_empty() {
            let outcomes: Vec<Finished> = expired.iter().map(|i| self.after_expiry(i)).collect();
            self.record(outcomes, &mut report).await?;
        }
        if self.stopping.load(Ordering::SeqCst) || self.actions.is_empty() {
            return Ok(report);
        }
        let request = self.request();
        let share = lock(&self.turns).share(request.limit);
        // Before the claim waits for anything: the lease window counts from here.
        let claim_started = Instant::now();
        let claimed = self.claim(&request, &share).await?;
        lock(&self.turns).advance(&share, request.limit, &claimed);
        report.claimed = claimed.len();
        if let Some(m) = &self.metrics {
            m.observe_claim(claimed.len());
        }
        let finished: Vec<Finished> = stream::iter(claimed)
            .map(|intent| {
                let expiry = lease::local_expiry(claim_started, &intent);
                self.deliver_or_release(intent, expiry)
            })
            .buffer_unordered(self.settings.concurrency.max(1))
            .collect()
            .await;
        self.record(finished, &mut report).await?;
        Ok(report)
    }

    /// Runs steps until one finds nothing due (tests and one-shot runs).
    pub async fn drain(&self) -> Result<StepReport, StoreError> {
        let mut total = StepReport::default();
        loop {
            let step = self.run_once().await?;
            total.add(&step);
            if !step.did_work() {
                return Ok(total);
            }
        }
    }

    pub(super) fn after_expiry(&self, intent: &ClaimedIntent) -> Finished {
        match self.actions.get(intent.action.as_str()) {
            Some(action) => Finished::Outcome(attempt::after_lease_expiry(action, intent)),
            // No configuration left for the action: nobody may judge it safe to resend.
            None => Finished::Outcome(OutcomeRecord {
                intent_id: intent.id,
                fencing_token: intent.fencing_token,
                attempt: None,
                transition: Transition::Unknown {
                    reason: format!(
                        "{} (action {:?} is no longer configured)",
                        crate::store::LEASE_EXPIRED_ERROR,
                        intent.action
                    ),
                },
                now: Utc::now(),
            }),
        }
    }

    /// Delivers `intent`, or hands it back unsent when shutting down, when its action lost
    /// its configuration, or when its lease (expiring at the local instant `lease_expiry`)
    /// no longer covers the request with a margin.
    pub(super) async fn deliver_or_release(
        &self,
        intent: ClaimedIntent,
        lease_expiry: Instant,
    ) -> Finished {
        let action = self.actions.get(intent.action.as_str());
        let short = action.and_then(|a| {
            lease::lease_too_short(lease_expiry, Instant::now(), a.client.request_timeout())
        });
        if let Some(reason) = short {
            tracing::warn!(intent_id = intent.id.get(), tenant = %intent.tenant,
                action = %intent.action, %reason, "lease too short to send; released");
            return Finished::handed_back(&intent, reason);
        }
        match action {
            Some(action) if !self.stopping.load(Ordering::SeqCst) => {
                let outcome = attempt::deliver(action, &intent).await;
                if let Some(m) = &self.metrics {
                    m.observe_outcome(&intent, action.client.name(), &outcome);
                }
                Finished::Outcome(outcome)
            }
            _ => Finished::handed_back(&intent, "released unsent (dispatcher shutting down)"),
        }
    }

    /// Writes outcomes and releases, retrying database errors while the lease still
    /// covers them: an outcome is only lost to lease expiry, which is handled as ambiguous.
    pub(super) async fn record(
        &self,
        finished: Vec<Finished>,
        report: &mut StepReport,
    ) -> Result<(), StoreError> {
        let (mut outcomes, mut releases) = (Vec::new(), Vec::new());
        for f in finished {
            match f {
                Finished::Outcome(o) => outcomes.push(o),
                Finished::Release(r) => releases.push(r),
            }
        }
        debug_assert!(
            {
                let mut seen = std::collections::HashSet::new();
                outcomes
                    .iter()
                    .map(|o| o.intent_id)
                    .chain(releases.iter().map(|r| r.intent_id))
                    .all(|id| seen.insert(id))
            },
            "a step finished the same intent twice"
        );
        let give_up_at = tokio::time::Instant::now() + self.settings.lease.mul_f64(0.8);
        let mut delay = Duration::from_millis(50);
        let mut retried = false;
        let results = loop {
            // A write that hangs (a connection dropped silently) is abandoned after
            // OUTCOME_WRITE_TIMEOUT and retried on a new session, like a failed one; the
            // fence makes a retry of a write that did commit apply nothing.
            let left = give_up_at.saturating_duration_since(tokio::time::Instant::now());
            let wait = left.min(OUTCOME_WRITE_TIMEOUT);
            let written = tokio::time::timeout(wait, self.store.record_outcomes(&outcomes))
                .await
                .unwrap_or_else(|_| Err(StoreError::unanswered("the outcome write", wait)));
            match written {
                Ok(results) => break results,
                Err(e) if tokio::time::Instant::now() + delay < give_up_at => {
                    tracing::warn!(error = %e, outcomes = outcomes.len(), "recording outcomes failed; retrying");
                    retried = true;
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(2));
                }
                Err(e) => {
                    // The releases do not depend on the outcomes: hand them back anyway.
                    let _ = release_retrying(self.store.as_ref(), &releases, give_up_at).await;
                    return Err(e);
                }
            }
        };
        // When the write returned: the delay observed below must not include the read that
        // tells an earlier try's commit from a takeover.
        let committed = Utc::now();
        // A failed or abandoned try may have committed after all: what it wrote is then
        // fenced off for the retry, but it is this write's outcome, not a lost lease.
        let results = if retried {
            self.written_before(&outcomes, results, give_up_at).await
        } else {
            results
        };
        for (outcome, result) in outcomes.iter().zip(results) {
            if let (Some(m), RecordResult::Recorded, Some(_)) =
                (&self.metrics, result, &outcome.attempt)
            {
                m.observe_outcome_written((committed - outcome.now).to_std().unwrap_or_default());
            }
            match (result, &outcome.transition) {
                (RecordResult::Fenced, _) => {
                    report.fenced += 1;
                    tracing::warn!(
                        intent_id = outcome.intent_id.get(),
                        "lease lost before the outcome was recorded; the new owner decides"
                    );
                }
                (_, Transition::Delivered { .. }) => report.delivered += 1,
                (_, Transition::RetryAt { .. }) => report.retried += 1,
                (_, Transition::Failed { .. }) => report.failed += 1,
                (_, Transition::Unknown { .. }) => report.unknown += 1,
            }
        }
        release_retrying(self.store.as_ref(), &releases, give_up_at).await?;
        report.released += releases.len();
        Ok(())
    }

    /// `results` of a retried outcome write, with each outcome reported fenced whose intent
    /// still carries the outcome's fencing token and is no longer in flight counted as
    /// recorded: an earlier try of this write recorded it (a takeover bumps the token). If
    /// that cannot be read by `give_up_at` (or within [`OUTCOME_WRITE_TIMEOUT`]), the
    /// results stay as they are.
    async fn written_before(
        &self,
        outcomes: &[OutcomeRecord],
        mut results: Vec<RecordResult>,
        give_up_at: tokio::time::Instant,
    ) -> Vec<RecordResult> {
        let fenced: Vec<_> = outcomes
            .iter()
            .zip(&results)
            .filter(|(_, r)| **r == RecordResult::Fenced)
            .map(|(o, _)| o.intent_id)
            .collect();
        if fenced.is_empty() {
            return results;
        }
        // Bounded like a write: the releases after it must not wait on a hung read.
        let left = give_up_at.saturating_duration_since(tokio::time::Instant::now());
        let wait = left.min(OUTCOME_WRITE_TIMEOUT);
        let read = tokio::time::timeout(wait, self.store.fencing_now(&fenced)).await;
        let now = match read
            .unwrap_or_else(|_| Err(StoreError::unanswered("the fencing read", wait)))
        {
            Ok(now) => now,
            Err(e) => {
                tracing::warn!(error = %e, "could not tell outcomes an earlier try recorded from lost leases");
                return results;
            }
        };
        for (outcome, result) in outcomes.iter().zip(results.iter_mut()) {
            let ours = now.iter().any(|(id, token, in_flight)| {
                *id == outcome.intent_id && *token == outcome.fencing_token && !in_flight
            });
            if *result == RecordResult::Fenced && ours {
                tracing::info!(
                    intent_id = outcome.intent_id.get(),
                    "outcome recorded by an earlier try of its write"
                );
                *result = RecordResult::Recorded;
            }
        }
        results
    }
}

/// Hands unsent claims back on `store`, retrying failed or unanswered tries (each bounded
/// by [`OUTCOME_WRITE_TIMEOUT`]) until `give_up_at`, while their leases still hold. A claim
/// not handed back stays leased until it expires and is then judged an ambiguous attempt —
/// for a `not_idempotent` action a reconciliation item for a request that was never sent —
/// so giving up is logged as an error.
pub(super) async fn release_retrying(
    store: &dyn ClaimStore,
    releases: &[Release],
    give_up_at: tokio::time::Instant,
) -> Result<(), StoreError> {
    if releases.is_empty() {
        return Ok(());
    }
    let mut delay = Duration::from_millis(50);
    loop {
        let left = give_up_at.saturating_duration_since(tokio::time::Instant::now());
        let wait = left.min(OUTCOME_WRITE_TIMEOUT);
        let released = tokio::time::timeout(wait, store.release_claims(releases, Utc::now()))
            .await
            .unwrap_or_else(|_| Err(StoreError::unanswered("handing back unsent claims", wait)));
        match released {
            Ok(()) => return Ok(()),
            Err(e) if tokio::time::Instant::now() + delay < give_up_at => {
                tracing::warn!(error = %e, releases = releases.len(), "handing back unsent claims failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
            }
            Err(e) => {
                let ids: Vec<_> = releases.iter().map(|r| r.intent_id).collect();
                tracing::error!(error = %e, intent_ids = ?ids, "could not hand back unsent claims: when their leases expire they will be treated as ambiguous attempts although they were never sent");
                return Err(e);
            }
        }
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
