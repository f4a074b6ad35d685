//! The outbox gauges, read from the database: the live backlog per action (pending,
//! in flight, unknown), the oldest due intent and the reconciliation queue.
//!
//! They come from one [`ReadStore::live_gauges`] read, which touches only live rows
//! through partial indexes, at most once per [`OUTBOX_REFRESH_INTERVAL`] however often
//! `/metrics` is scraped. On PostgreSQL one replica at a time computes them (the store's
//! gauge lock); the others export none of these series, so a sum or max over replicas
//! counts each value once.
//!
//! Instants are exported as timestamps (`*_timestamp_seconds`), which stay true when a
//! refresh fails. The age gauges are recomputed from those timestamps at every scrape, so
//! they keep growing while the database cannot be read instead of freezing at an old value;
//! after [`STALE_AFTER`] without a successful read every database-derived series is dropped.
//! Failures are counted and the last success time exported, for the "gauges stale" alert.

use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use tokio::sync::Mutex;

use crate::store::{GaugeRead, LiveGauges, ReadStore};

/// The shortest time between two database reads of the outbox gauges.
pub const OUTBOX_REFRESH_INTERVAL: Duration = Duration::from_secs(5);
/// How long one refresh may take before it is abandoned (the scrape still answers).
const REFRESH_TIMEOUT: Duration = Duration::from_secs(5);
/// After this long without a successful read, the database-derived series are dropped.
pub const STALE_AFTER: Duration = Duration::from_secs(60);

/// Labels of `outboxd_intents`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: String,
    action: String,
}

/// Labels of the per-action outbox gauges.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabels {
    action: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// What the last successful read found, and when.
#[derive(Debug, Default)]
struct Known {
    gauges: LiveGauges,
    read_at: Option<Instant>,
    attempted_at: Option<Instant>,
}

/// The gauges read from the database.
pub struct OutboxGauges {
    intents: Family<StateLabels, Gauge>,
    oldest_due_at: Family<ActionLabels, FloatGauge>,
    oldest_due_age: Family<ActionLabels, FloatGauge>,
    reconciliation_open: Family<ActionLabels, Gauge>,
    reconciliation_oldest_at: Family<ActionLabels, FloatGauge>,
    reconciliation_oldest_age: Family<ActionLabels, FloatGauge>,
    leader: Gauge,
    refresh_errors: Counter,
    last_success: FloatGauge,
    known: Mutex<Known>,
}

fn unix_seconds(at: DateTime<Utc>) -> f64 {
    at.timestamp_millis() as f64 / 1000.0
}

fn age_seconds(since: DateTime<Utc>, now: DateTime<Utc>) -> f64 {
    (now - since)
        .to_std()
        .unwrap_or(Duration::ZERO)
        .as_secs_f64()
}

fn action(name: &str) -> ActionLabels {
    ActionLabels {
        action: name.to_owned(),
    }
}

impl OutboxGauges {
    /// Creates the gauges and registers them in `registry`.
    pub(super) fn register(registry: &mut Registry) -> Self {
        let gauges = Self {
            intents: Family::default(),
            oldest_due_at: Family::default(),
            oldest_due_age: Family::default(),
            reconciliation_open: Family::default(),
            reconciliation_oldest_at: Family::default(),
            reconciliation_oldest_age: Family::default(),
            leader: Gauge::default(),
            refresh_errors: Counter::default(),
            last_success: FloatGauge::default(),
            known: Mutex::new(Known::default()),
        };
        registry.register(
            "intents",
            "Live intents by state (pending, in_flight, unknown) and action, read from the database by one replica",
            gauges.intents.clone(),
        );
        registry.register(
            "oldest_due_timestamp_seconds",
            "Enqueue time (Unix seconds) of the oldest pending, due intent per action; absent when none is due",
            gauges.oldest_due_at.clone(),
        );
        registry.register_with_unit(
            "oldest_due_intent_age",
            "Time since the oldest pending, due intent per action was enqueued, at scrape time; absent when none is due",
            Unit::Seconds,
            gauges.oldest_due_age.clone(),
        );
        registry.register(
            "reconciliation_open_items",
            "Open reconciliation items (intents whose outcome is unknown) per action",
            gauges.reconciliation_open.clone(),
        );
        registry.register(
            "reconciliation_oldest_timestamp_seconds",
            "Opening time (Unix seconds) of the oldest open reconciliation item per action",
            gauges.reconciliation_oldest_at.clone(),
        );
        registry.register_with_unit(
            "reconciliation_oldest_age",
            "Time since the oldest open reconciliation item per action was opened, at scrape time",
            Unit::Seconds,
            gauges.reconciliation_oldest_age.clone(),
        );
        registry.register(
            "outbox_stats_leader",
            "1 while this replica computes the database-derived gauges (one replica at a time)",
            gauges.leader.clone(),
        );
        registry.register(
            "outbox_stats_refresh_errors",
            "Failed database reads of the outbox gauges",
            gauges.refresh_errors.clone(),
        );
        registry.register(
            "outbox_stats_last_success_timestamp_seconds",
            "When (Unix seconds) this replica last read the outbox gauges successfully",
            gauges.last_success.clone(),
        );
        gauges
    }

    fn clear(&self) {
        self.intents.clear();
        self.oldest_due_at.clear();
        self.oldest_due_age.clear();
        self.reconciliation_open.clear();
        self.reconciliation_oldest_at.clear();
        self.reconciliation_oldest_age.clear();
    }

    /// Replaces every database-derived series with `live`, ages measured at `now`. An
    /// action that has no live rows any more loses its series.
    pub fn set(&self, live: &LiveGauges, now: DateTime<Utc>) {
        self.clear();
        for a in &live.actions {
            let labels = action(&a.action);
            for (state, n) in [
                ("pending", a.pending),
                ("in_flight", a.in_flight),
                ("unknown", a.reconciliation_open),
            ] {
                let key = StateLabels {
                    state: state.to_owned(),
                    action: a.action.clone(),
                };
                self.intents.get_or_create(&key).set(n);
            }
            self.reconciliation_open
                .get_or_create(&labels)
                .set(a.reconciliation_open);
            if let Some(at) = a.oldest_due_at {
                self.oldest_due_at
                    .get_or_create(&labels)
                    .set(unix_seconds(at));
            }
            if let Some(at) = a.reconciliation_oldest_at {
                self.reconciliation_oldest_at
                    .get_or_create(&labels)
                    .set(unix_seconds(at));
            }
        }
        self.set_ages(live, now);
    }

    /// Recomputes the age gauges at `now` from the known timestamps.
    fn set_ages(&self, live: &LiveGauges, now: DateTime<Utc>) {
        for a in &live.actions {
            let labels = action(&a.action);
            if let Some(at) = a.oldest_due_at {
                self.oldest_due_age
                    .get_or_create(&labels)
                    .set(age_seconds(at, now));
            }
            if let Some(at) = a.reconciliation_oldest_at {
                self.reconciliation_oldest_age
                    .get_or_create(&labels)
                    .set(age_seconds(at, now));
            }
        }
    }

    /// Reads the gauges from `store` unless they were read less than
    /// [`OUTBOX_REFRESH_INTERVAL`] ago, then runs `encode` while no other scrape can change
    /// them. Concurrent scrapes wait for one read instead of each issuing their own.
    /// Failures are logged and counted, never returned.
    pub(super) async fn refresh_then<T>(
        &self,
        store: &(impl ReadStore + ?Sized),
        encode: impl FnOnce() -> T,
    ) -> T {
        let mut known = self.known.lock().await;
        let due = known
            .attempted_at
            .is_none_or(|at| at.elapsed() >= OUTBOX_REFRESH_INTERVAL);
        let now = Utc::now();
        if due {
            known.attempted_at = Some(Instant::now());
            match tokio::time::timeout(REFRESH_TIMEOUT, store.live_gauges(now)).await {
                Ok(Ok(GaugeRead::Read(live))) => {
                    self.set(&live, now);
                    self.leader.set(1);
                    self.last_success.set(unix_seconds(now));
                    known.gauges = live;
                    known.read_at = Some(Instant::now());
                }
                Ok(Ok(GaugeRead::OtherReplica)) => {
                    self.clear();
                    self.leader.set(0);
                    *known = Known {
                        attempted_at: known.attempted_at,
                        ..Known::default()
                    };
                }
                Ok(Err(e)) => {
                    self.refresh_errors.inc();
                    tracing::warn!(error = %e, "cannot read the outbox for metrics; ages keep growing from the last known values");
                }
                Err(_) => {
                    self.refresh_errors.inc();
                    tracing::warn!(timeout = ?REFRESH_TIMEOUT,
                        "reading the outbox for metrics timed out; ages keep growing from the last known values");
                }
            }
        }
        match known.read_at {
            Some(at) if at.elapsed() < STALE_AFTER => self.set_ages(&known.gauges, now),
            Some(_) => {
                self.clear();
                self.leader.set(0);
                known.read_at = None;
                known.gauges = LiveGauges::default();
            }
            None => {}
        }
        encode()
    }
}
