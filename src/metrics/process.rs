//! Process metrics: `outboxd_build_info`, the configured actions, the database connection
//! pool, the scheduled jobs (last success time, failures) and retention progress (rows
//! deleted so far).

use std::sync::atomic::AtomicU64;

use chrono::Utc;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::store::PoolStats;

/// Labels of `outboxd_build_info`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
    profile: String,
}

/// Labels of the per-job metrics (not `job`, which Prometheus sets to the scrape job).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabels {
    scheduled_job: String,
}

/// Labels of `outboxd_action_configured`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConfiguredLabels {
    action: String,
    provider: String,
}

/// Labels of `outboxd_retention_deleted_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

/// What one scheduled job run came to, for [`ProcessMetrics::observe_job`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobResult {
    /// It ran and succeeded.
    Succeeded,
    /// Another replica held the job's lock.
    Skipped,
    /// It failed.
    Failed,
}

/// The process metrics.
#[derive(Debug, Clone, Default)]
pub struct ProcessMetrics {
    pool_open: Gauge,
    pool_idle: Gauge,
    pool_max: Gauge,
    job_last_success: Family<JobLabels, Gauge<f64, AtomicU64>>,
    job_failures: Family<JobLabels, Counter>,
    retention_deleted: Family<KindLabels, Counter>,
    configured: Family<ConfiguredLabels, Gauge>,
}

impl ProcessMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub(super) fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        let build = Family::<BuildLabels, Gauge>::default();
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION").to_owned(),
                profile: if cfg!(debug_assertions) {
                    "debug"
                } else {
                    "release"
                }
                .to_owned(),
            })
            .set(1);
        registry.register(
            "build_info",
            "Always 1; the labels say which build this process runs",
            build,
        );
        registry.register(
            "db_pool_connections",
            "Database connections open in this process's pool (idle or in use)",
            m.pool_open.clone(),
        );
        registry.register(
            "db_pool_idle_connections",
            "Idle database connections in this process's pool",
            m.pool_idle.clone(),
        );
        registry.register(
            "db_pool_max_connections",
            "The pool's configured maximum",
            m.pool_max.clone(),
        );
        registry.register(
            "job_last_success_timestamp_seconds",
            "When (Unix seconds) a scheduled job last ran to completion on this replica",
            m.job_last_success.clone(),
        );
        registry.register(
            "job_failures",
            "Scheduled job runs that failed on this replica",
            m.job_failures.clone(),
        );
        registry.register(
            "retention_deleted",
            "Rows deleted by retention on this replica, by kind (intents, tombstones), batch by batch",
            m.retention_deleted.clone(),
        );
        registry.register(
            "action_configured",
            "1 for each action this process is configured to deliver, with its provider",
            m.configured.clone(),
        );
        m
    }

    /// Declares the configured actions as `(action, provider)` pairs, so alerts can tell a
    /// backlog nobody delivers (an unconfigured action) from one that falls behind.
    pub fn set_configured_actions<'a>(
        &self,
        actions: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) {
        self.configured.clear();
        for (action, provider) in actions {
            let labels = ConfiguredLabels {
                action: action.to_owned(),
                provider: provider.to_owned(),
            };
            self.configured.get_or_create(&labels).set(1);
        }
    }

    /// Sets the pool gauges.
    pub fn set_pool(&self, stats: PoolStats) {
        self.pool_open.set(i64::from(stats.open));
        self.pool_idle.set(i64::from(stats.idle));
        self.pool_max.set(i64::from(stats.max));
    }

    /// Records the end of one scheduled run of `job`.
    pub fn observe_job(&self, job: &str, result: JobResult) {
        let labels = JobLabels {
            scheduled_job: job.to_owned(),
        };
        match result {
            JobResult::Succeeded => {
                let now = Utc::now().timestamp_millis() as f64 / 1000.0;
                self.job_last_success.get_or_create(&labels).set(now);
            }
            JobResult::Skipped => {}
            JobResult::Failed => {
                self.job_failures.get_or_create(&labels).inc();
            }
        }
    }

    /// Adds one retention batch: `intents` pruned and `tombstones` expired.
    pub fn observe_retention_batch(&self, intents: u64, tombstones: u64) {
        for (kind, n) in [("intents", intents), ("tombstones", tombstones)] {
            let labels = KindLabels {
                kind: kind.to_owned(),
            };
            let counter = self.retention_deleted.get_or_create(&labels);
            if n > 0 {
                counter.inc_by(n);
            }
        }
    }
}
