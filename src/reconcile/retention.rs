//! The retention job: prune intents finished longer ago than `retention.finished_after`
//! (their attempts and reconciliation items go with them) in batches, keeping a tombstone
//! per `(tenant, operation_id)`, then expire tombstones older than
//! `retention.tombstone_after`. Unfinished intents (pending, in flight, unknown) are never
//! pruned. One pass is [`run_retention_once`]; scheduling lives in [`super::jobs`].

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::config::RetentionConfig;
use crate::store::{OutboxStore, StoreError};

/// Intents pruned per statement (one transaction each).
pub const DEFAULT_BATCH_SIZE: u32 = 1000;

/// The retention windows and batch size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionSettings {
    /// Finished intents older than this are pruned.
    pub finished_after: Duration,
    /// Tombstones of intents finished longer ago than this are deleted.
    pub tombstone_after: Duration,
    /// Intents pruned per batch.
    pub batch_size: u32,
}

impl RetentionSettings {
    /// The settings of `[retention]`, with [`DEFAULT_BATCH_SIZE`].
    pub fn from_config(config: &RetentionConfig) -> Self {
        Self {
            finished_after: config.finished_after,
            tombstone_after: config.tombstone_after,
            batch_size: DEFAULT_BATCH_SIZE,
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
    /// Batches (statements) it took.
    pub batches: u32,
    /// Tombstones deleted.
    pub tombstones_pruned: u64,
}

/// Prunes in batches until a batch comes back short, then expires tombstones. A failed
/// batch stops the pass; what earlier batches pruned stays pruned (each is atomic), and the
/// next run continues.
pub async fn run_retention_once(
    store: &dyn OutboxStore,
    settings: &RetentionSettings,
    now: DateTime<Utc>,
) -> Result<RetentionReport, StoreError> {
    let (finished_before, tombstones_before) = settings.cutoffs(now);
    let batch_size = settings.batch_size.max(1);
    let mut report = RetentionReport {
        finished_before,
        tombstones_before,
        intents_pruned: 0,
        batches: 0,
        tombstones_pruned: 0,
    };
    loop {
        let pruned = store
            .prune_finished(finished_before, now, batch_size)
            .await?;
        report.batches += 1;
        report.intents_pruned += pruned;
        // Short batch: nothing left (on PostgreSQL, rows locked by another writer are
        // skipped and left for the next run).
        if pruned < u64::from(batch_size) {
            break;
        }
    }
    report.tombstones_pruned = store.prune_tombstones(tombstones_before).await?;
    if report.intents_pruned > 0 || report.tombstones_pruned > 0 {
        tracing::info!(
            intents_pruned = report.intents_pruned,
            batches = report.batches,
            tombstones_pruned = report.tombstones_pruned,
            %finished_before,
            %tombstones_before,
            "retention pass pruned finished intents and old tombstones"
        );
    }
    Ok(report)
}
