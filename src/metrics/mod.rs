//! Prometheus metrics (the `prometheus-client` crate, OpenMetrics text format) served on
//! the admin server's `/metrics`.
//!
//! Two kinds live here:
//!
//! * **Events** the dispatcher reports as they happen ([`Metrics::observe_attempt`],
//!   [`Metrics::observe_claim`], [`Metrics::observe_lease_expiries`],
//!   [`Metrics::observe_outcome_written`]): attempts by action and class, delivery latency,
//!   enqueue-to-first-attempt latency, claim batch sizes, lease expiries and how long a
//!   known outcome waited to be committed. They count what *this process* did.
//!   Terminal outcomes are counters here ([`Metrics::observe_outcome`]), never counts of
//!   finished rows, so no scrape reads the finished history.
//! * **Outbox gauges** read from the database ([`OutboxGauges`]): the live backlog per action
//!   (pending, in flight, unknown), the oldest due intent, the reconciliation queue. They
//!   describe the shared outbox, so one replica at a time computes them (on PostgreSQL an
//!   advisory lock; the others export none); refreshed on scrape, at most once per
//!   [`OUTBOX_REFRESH_INTERVAL`].
//! * **Process metrics** ([`process::ProcessMetrics`]): build info, the connection pool, the
//!   scheduled jobs' last success, retention progress.
//! * **Provider gauges** the delivery pipeline sets ([`providers::ProviderGauges`]):
//!   requests in flight, breaker state, `Retry-After` pause, rate-limited claims.
//!
//! Nothing here touches the network or decides anything; the admin server encodes, the
//! dispatcher reports.

mod outbox;
pub mod process;
pub mod providers;

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::store::{AttemptRecord, ClaimedIntent, OutcomeRecord, PoolStats, ReadStore, Transition};

pub use outbox::{OutboxGauges, OUTBOX_REFRESH_INTERVAL, STALE_AFTER};

/// The `Content-Type` of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Upper bounds (seconds) of the delivery latency buckets.
const DELIVERY_BUCKETS: [f64; 13] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
/// Upper bounds (seconds) of the enqueue-to-first-attempt buckets: from 10 ms to a day.
const FIRST_ATTEMPT_BUCKETS: [f64; 14] = [
    0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 21600.0, 86400.0,
];
/// Upper bounds (seconds) of the outcome write delay buckets: from 1 ms to the default lease.
const WRITE_DELAY_BUCKETS: [f64; 14] = [
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Upper bounds of the claim batch size buckets.
const BATCH_BUCKETS: [f64; 11] = [
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 10000.0,
];

/// Labels of per-action, per-provider metrics.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabels {
    action: String,
    provider: String,
}

/// Labels of `outboxd_attempts_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AttemptLabels {
    action: String,
    provider: String,
    class: String,
}

/// Labels of `outboxd_intents_finished_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    action: String,
    provider: String,
    state: String,
}

type HistogramFamily = Family<ActionLabels, Histogram, fn() -> Histogram>;

fn delivery_histogram() -> Histogram {
    Histogram::new(DELIVERY_BUCKETS)
}

fn first_attempt_histogram() -> Histogram {
    Histogram::new(FIRST_ATTEMPT_BUCKETS)
}

/// Every metric of one `outboxd` process, and the registry that encodes them. Share it as
/// `Arc<Metrics>` between the dispatcher and the admin server.
pub struct Metrics {
    registry: Registry,
    attempts: Family<AttemptLabels, Counter>,
    finished: Family<OutcomeLabels, Counter>,
    delivery_seconds: HistogramFamily,
    first_attempt_seconds: HistogramFamily,
    lease_expiries: Counter,
    claims_given_up: Counter,
    write_delay: Histogram,
    claim_batch: Histogram,
    outbox: OutboxGauges,
    providers: providers::ProviderGauges,
    process: process::ProcessMetrics,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh set of metrics (all zero), registered under the `outboxd_` prefix.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("outboxd");
        let attempts = Family::<AttemptLabels, Counter>::default();
        registry.register(
            "attempts",
            "Delivery attempts made by this process, by action, provider and attempt class",
            attempts.clone(),
        );
        let finished = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "intents_finished",
            "Outcomes this process recorded that end the dispatcher's work on an intent: delivered, failed, or unknown (handed to reconciliation)",
            finished.clone(),
        );
        let delivery_seconds: HistogramFamily = Family::new_with_constructor(delivery_histogram);
        registry.register_with_unit(
            "delivery_duration",
            "Time from sending a request to classifying its outcome, by action and provider",
            Unit::Seconds,
            delivery_seconds.clone(),
        );
        let first_attempt_seconds: HistogramFamily =
            Family::new_with_constructor(first_attempt_histogram);
        registry.register_with_unit(
            "enqueue_to_first_attempt",
            "Time from enqueue to the start of the first attempt (includes any not_before delay), by action and provider",
            Unit::Seconds,
            first_attempt_seconds.clone(),
        );
        let lease_expiries = Counter::default();
        registry.register(
            "lease_expiries",
            "In-flight intents whose lease expired and that this process took over (each counts as an ambiguous attempt)",
            lease_expiries.clone(),
        );
        let claims_given_up = Counter::default();
        registry.register(
            "claims_given_up",
            "Claims this process stopped waiting for after the lease (a database connection that stopped answering); what a late answer claimed is handed back unsent",
            claims_given_up.clone(),
        );
        let write_delay = Histogram::new(WRITE_DELAY_BUCKETS);
        registry.register(
            "outcome_write_delay_seconds",
            "Time from an attempt's outcome being known (its answer read and classified) to that outcome committed, for outcomes this process recorded: how long a known outcome could be lost to a crash (its intent then taken over as ambiguous)",
            write_delay.clone(),
        );
        let claim_batch = Histogram::new(BATCH_BUCKETS);
        registry.register(
            "claim_batch_size",
            "Intents claimed per claim that returned at least one intent",
            claim_batch.clone(),
        );
        let outbox = OutboxGauges::register(&mut registry);
        let providers = providers::ProviderGauges::register(&mut registry);
        let process = process::ProcessMetrics::register(&mut registry);
        Self {
            registry,
            attempts,
            finished,
            delivery_seconds,
            first_attempt_seconds,
            lease_expiries,
            claims_given_up,
            write_delay,
            claim_batch,
            outbox,
            providers,
            process,
        }
    }

    /// Build info, pool, jobs and retention progress.
    pub fn process(&self) -> &process::ProcessMetrics {
        &self.process
    }

    /// The per-provider bulkhead gauges.
    pub fn providers(&self) -> &providers::ProviderGauges {
        &self.providers
    }

    /// A fresh set behind an `Arc`, ready to share.
    pub fn shared() -> Arc<Self> {
        Arc::new(Self::new())
    }

    /// Records one delivery of `intent` to `provider`: the attempt's class, duration and,
    /// for the first attempt, the time since enqueue; and, when the outcome ends the
    /// dispatcher's work on the intent, its state.
    pub fn observe_outcome(&self, intent: &ClaimedIntent, provider: &str, outcome: &OutcomeRecord) {
        if let Some(attempt) = &outcome.attempt {
            self.observe_attempt(intent, provider, attempt);
        }
        let state = match outcome.transition {
            Transition::Delivered { .. }
            | Transition::Failed { .. }
            | Transition::Unknown { .. } => outcome.transition.state(),
            Transition::RetryAt { .. } => return,
        };
        self.finished
            .get_or_create(&OutcomeLabels {
                action: intent.action.to_string(),
                provider: provider.to_owned(),
                state: state.as_str().to_owned(),
            })
            .inc();
    }

    /// Records one finished attempt of `intent` at `provider`: its class, its duration and,
    /// for the first attempt, the time since enqueue.
    pub fn observe_attempt(&self, intent: &ClaimedIntent, provider: &str, attempt: &AttemptRecord) {
        let action = ActionLabels {
            action: intent.action.to_string(),
            provider: provider.to_owned(),
        };
        self.attempts
            .get_or_create(&AttemptLabels {
                action: intent.action.to_string(),
                provider: provider.to_owned(),
                class: attempt.class.as_str().to_owned(),
            })
            .inc();
        self.delivery_seconds
            .get_or_create(&action)
            .observe(attempt.duration.as_secs_f64());
        if intent.attempt_count == 1 {
            let waited = (attempt.started_at - intent.created_at)
                .to_std()
                .unwrap_or(Duration::ZERO);
            self.first_attempt_seconds
                .get_or_create(&action)
                .observe(waited.as_secs_f64());
        }
    }

    /// Records the size of a claim; empty claims (an idle poll) are not recorded.
    pub fn observe_claim(&self, claimed: usize) {
        if claimed > 0 {
            self.claim_batch.observe(claimed as f64);
        }
    }

    /// Records intents taken over after their lease expired.
    pub fn observe_lease_expiries(&self, expired: usize) {
        if expired > 0 {
            self.lease_expiries.inc_by(expired as u64);
        }
    }

    /// Counts a claim given up on after the lease ([`crate::dispatch::claim`]).
    pub fn observe_claim_given_up(&self) {
        self.claims_given_up.inc();
    }

    /// Records how long an attempt's outcome, known `delay` before, waited to be committed
    /// ([`crate::dispatch::dispatcher`]'s outcome writes).
    pub fn observe_outcome_written(&self, delay: Duration) {
        self.write_delay.observe(delay.as_secs_f64());
    }

    /// The gauges read from the database.
    pub fn outbox(&self) -> &OutboxGauges {
        &self.outbox
    }

    /// What `GET /metrics` answers: refreshes the outbox gauges from `store` (at most once
    /// per [`OUTBOX_REFRESH_INTERVAL`]), sets the pool gauges from `pool`, and encodes every
    /// metric while no concurrent scrape can change the outbox gauges.
    pub async fn scrape(
        &self,
        store: &(impl ReadStore + ?Sized),
        pool: PoolStats,
    ) -> Result<String, std::fmt::Error> {
        self.process.set_pool(pool);
        self.outbox.refresh_then(store, || self.encode()).await
    }

    /// Every metric in the OpenMetrics text format (see [`CONTENT_TYPE`]).
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
