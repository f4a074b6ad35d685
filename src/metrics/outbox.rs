//! The outbox gauges: intents by state, the age of the oldest due intent, the size and age
//! of the reconciliation queue. They come from one [`OutboxStore::status_summary`] call,
//! which counts rows, so it runs at most once per [`OUTBOX_REFRESH_INTERVAL`] however
//! often `/metrics` is scraped; a failed refresh keeps the previous values and counts the
//! failure.

use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use tokio::sync::Mutex;

use crate::store::{OutboxStore, StatusSummary};

/// The shortest time between two database reads of the outbox gauges.
pub const OUTBOX_REFRESH_INTERVAL: Duration = Duration::from_secs(5);
/// How long one refresh may take before it is abandoned (the scrape still answers).
const REFRESH_TIMEOUT: Duration = Duration::from_secs(5);

/// Labels of `outboxd_intents`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: String,
}

/// The gauges read from the database, and when they were last read.
pub struct OutboxGauges {
    intents: Family<StateLabels, Gauge>,
    oldest_due_age: Gauge<f64, AtomicU64>,
    reconciliation_open: Gauge,
    reconciliation_oldest_age: Gauge<f64, AtomicU64>,
    refresh_errors: Counter,
    last_refresh: Mutex<Option<Instant>>,
}

fn age_seconds(since: Option<DateTime<Utc>>, now: DateTime<Utc>) -> f64 {
    since.map_or(0.0, |at| {
        (now - at).to_std().unwrap_or(Duration::ZERO).as_secs_f64()
    })
}

impl OutboxGauges {
    /// Creates the gauges and registers them in `registry`.
    pub(super) fn register(registry: &mut Registry) -> Self {
        let gauges = Self {
            intents: Family::default(),
            oldest_due_age: Gauge::default(),
            reconciliation_open: Gauge::default(),
            reconciliation_oldest_age: Gauge::default(),
            refresh_errors: Counter::default(),
            last_refresh: Mutex::new(None),
        };
        registry.register(
            "intents",
            "Intents in the outbox by state (read from the database)",
            gauges.intents.clone(),
        );
        registry.register_with_unit(
            "oldest_due_intent_age",
            "Time since the oldest pending, due intent was enqueued; 0 when nothing is due",
            Unit::Seconds,
            gauges.oldest_due_age.clone(),
        );
        registry.register(
            "reconciliation_open_items",
            "Open reconciliation items (intents whose outcome is unknown)",
            gauges.reconciliation_open.clone(),
        );
        registry.register_with_unit(
            "reconciliation_oldest_age",
            "Time since the oldest open reconciliation item was opened; 0 when none is open",
            Unit::Seconds,
            gauges.reconciliation_oldest_age.clone(),
        );
        registry.register(
            "outbox_stats_refresh_errors",
            "Failed database reads of the outbox gauges (the previous values are kept)",
            gauges.refresh_errors.clone(),
        );
        gauges
    }

    /// Sets every gauge from `summary`, ages measured at `now`.
    pub fn set(&self, summary: &StatusSummary, now: DateTime<Utc>) {
        for (state, count) in &summary.by_state {
            let labels = StateLabels {
                state: state.as_str().to_owned(),
            };
            self.intents.get_or_create(&labels).set(*count);
        }
        self.oldest_due_age
            .set(age_seconds(summary.oldest_due_at, now));
        self.reconciliation_open.set(summary.reconciliation_open);
        self.reconciliation_oldest_age
            .set(age_seconds(summary.reconciliation_oldest_at, now));
    }

    /// Reads the summary from `store` and sets the gauges, unless they were read less than
    /// [`OUTBOX_REFRESH_INTERVAL`] ago. Concurrent scrapes wait for one read instead of
    /// each issuing their own. Failures are logged and counted, never returned.
    pub async fn refresh(&self, store: &dyn OutboxStore) {
        let mut last = self.last_refresh.lock().await;
        if last.is_some_and(|at| at.elapsed() < OUTBOX_REFRESH_INTERVAL) {
            return;
        }
        let now = Utc::now();
        match tokio::time::timeout(REFRESH_TIMEOUT, store.status_summary(now)).await {
            Ok(Ok(summary)) => {
                self.set(&summary, now);
                *last = Some(Instant::now());
            }
            Ok(Err(e)) => {
                self.refresh_errors.inc();
                tracing::warn!(error = %e, "cannot read the outbox for metrics; keeping the previous values");
            }
            Err(_) => {
                self.refresh_errors.inc();
                tracing::warn!(timeout = ?REFRESH_TIMEOUT,
                    "reading the outbox for metrics timed out; keeping the previous values");
            }
        }
    }
}
