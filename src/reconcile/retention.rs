//! The retention job: prune intents finished longer ago than `retention.finished_after`
//! (their attempts and reconciliation items go with them) in batches, keeping a tombstone
//! per `(tenant, operation_id)`, then expire tombstones older than
//! `retention.tombstone_after`, in batches too. Unfinished intents (pending, in flight,
//! unknown) are never pruned. One pass is [`run_retention_once`]; scheduling lives in
//! [`super::jobs`].
//!
//! The batching rule is written once, here, for both kinds and both backends: each batch
//! is one short transaction of at most `batch_size` rows chosen by index order; a short
//! batch ends the phase; between full batches the pass pauses `batch_pause` so autovacuum
//! and the dispatcher get the disk; every batch is reported to the caller (metrics) and a
//! progress line is logged at most every [`PROGRESS_EVERY`]. Backends only run one batch.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::config::RetentionConfig;
use crate::store::{RetentionStore, StoreError};

/// Rows deleted per statement (one transaction each) unless `retention.batch_size` says.
pub const DEFAULT_BATCH_SIZE: u32 = 1000;
/// The shortest time between two progress log lines of one pass.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// The retention windows and batch size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionSettings {
    /// Finished intents older than this are pruned.
    pub finished_after: Duration,
    /// Tombstones of intents finished longer ago than this are deleted.
    pub tombstone_after: Duration,
    /// Rows (intents, or tombstones) deleted per batch.
    pub batch_size: u32,
    /// Pause between two full batches.
    pub batch_pause: Duration,
}

impl RetentionSettings {
    /// The settings of `[retention]`.
    pub fn from_config(config: &RetentionConfig) -> Self {
        Self {
            finished_after: config.finished_after,
            tombstone_after: config.tombstone_after,
            batch_size: config.batch_size,
            batch_pause: config.batch_pause,
        }
    }

    /// The cut-offs at `now`: (intents finished before, tombstones finished before).
    pub fn cutoffs(&self, now: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
        (
            before(now, self.finished_after),
            before(now, self.tombstone_after),
        )
    }
}

/// `now - window`, or the earliest representable instant for an absurdly long window.
fn before(now: DateTime<Utc>, window: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(window)
        .ok()
        .and_then(|w| now.checked_sub_signed(w))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// What one pass removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RetentionReport {
    /// Intents finished before this were pruned.
    pub finished_before: DateTime<Utc>,
    /// Tombstones of intents finished before this were deleted.
    pub tombstones_before: DateTime<Utc>,
    /// Intents pruned (each left a tombstone, unless one already existed).
    pub intents_pruned: u64,
    /// Batches (statements) pruning intents took.
    pub batches: u32,
    /// Tombstones deleted.
    pub tombstones_pruned: u64,
    /// Batches (statements) expiring tombstones took.
    pub tombstone_batches: u32,
}

/// What one batch deleted, as reported to [`run_retention_observed`]'s observer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetentionBatch {
    /// Finished intents moved to tombstones.
    Intents(u64),
    /// Tombstones expired.
    Tombstones(u64),
}

/// The two phases of a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Intents,
    Tombstones,
}

/// [`run_retention_observed`] without an observer.
pub async fn run_retention_once(
    store: &(impl RetentionStore + ?Sized),
    settings: &RetentionSettings,
    now: DateTime<Utc>,
) -> Result<RetentionReport, StoreError> {
    run_retention_observed(store, settings, now, &mut |_| {}).await
}

/// Prunes finished intents in batches until a batch comes back short, then expires
/// tombstones the same way; `on_batch` hears of every batch as it commits. A failed batch
/// stops the pass; what earlier batches deleted stays deleted (each is atomic), and the
/// next run continues.
pub async fn run_retention_observed(
    store: &(impl RetentionStore + ?Sized),
    settings: &RetentionSettings,
    now: DateTime<Utc>,
    on_batch: &mut (dyn FnMut(RetentionBatch) + Send),
) -> Result<RetentionReport, StoreError> {
    let (finished_before, tombstones_before) = settings.cutoffs(now);
    let batch_size = settings.batch_size.max(1);
    let mut report = RetentionReport {
        finished_before,
        tombstones_before,
        intents_pruned: 0,
        batches: 0,
        tombstones_pruned: 0,
        tombstone_batches: 0,
    };
    let started = Instant::now();
    let mut last_progress = started;
    for phase in [Phase::Intents, Phase::Tombstones] {
        loop {
            let deleted = match phase {
                Phase::Intents => {
                    let n = store
                        .prune_finished(finished_before, now, batch_size)
                        .await?;
                    report.intents_pruned += n;
                    report.batches += 1;
                    on_batch(RetentionBatch::Intents(n));
                    n
                }
                Phase::Tombstones => {
                    let n = store
                        .prune_tombstones(tombstones_before, batch_size)
                        .await?;
                    report.tombstones_pruned += n;
                    report.tombstone_batches += 1;
                    on_batch(RetentionBatch::Tombstones(n));
                    n
                }
            };
            // Short batch: nothing left (on PostgreSQL, rows locked by another writer are
            // skipped and left for the next run).
            if deleted < u64::from(batch_size) {
                break;
            }
            if last_progress.elapsed() >= PROGRESS_EVERY {
                last_progress = Instant::now();
                tracing::info!(
                    intents_pruned = report.intents_pruned,
                    tombstones_pruned = report.tombstones_pruned,
                    batches = report.batches + report.tombstone_batches,
                    elapsed = ?started.elapsed(),
                    "retention pass in progress"
                );
            }
            if !settings.batch_pause.is_zero() {
                tokio::time::sleep(settings.batch_pause).await;
            }
        }
    }
    if report.intents_pruned > 0 || report.tombstones_pruned > 0 {
        tracing::info!(
            intents_pruned = report.intents_pruned,
            batches = report.batches,
            tombstones_pruned = report.tombstones_pruned,
            tombstone_batches = report.tombstone_batches,
            elapsed = ?started.elapsed(),
            %finished_before,
            %tombstones_before,
            "retention pass pruned finished intents and old tombstones"
        );
    }
    Ok(report)
}
