//! The retention job: prune intents finished longer ago than `retention.finished_after`
//! (their attempts and reconciliation items go with them) in batches, keeping a tombstone
//! per `(tenant, operation_id)`, then expire tombstones older than
//! `retention.tombstone_after`, in batches too. Unfinished intents (pending, in flight,
//! unknown) are never pruned. One pass is [`run_retention_once`]; scheduling lives in
//! [`super::jobs`].
//!
//! The batching rule is written once, here, for both kinds and both backends: each batch
//! is one short transaction of at most `batch_size` rows chosen by index order; a short
//! batch ends the phase; between full batches the pass pauses `batch_pause`, and at least
//! twice as long as the batch took ([`pause_after`]), so a pass holds the database for at
//! most a third of its time whatever a batch costs, leaving the rest to the dispatcher and
//! autovacuum; every batch is reported to the caller (metrics) and a progress line is
//! logged at most every [`PROGRESS_EVERY`]. Backends only run one batch.
//!
//! The reclaiming rule is here too: with `retention.vacuum` on, a pass that deleted rows
//! asks the store to reclaim the tables it deleted from ([`pruned_tables`]) once, after
//! its last batch, so the next window's rows reuse the space instead of growing the
//! table (PostgreSQL `VACUUM (ANALYZE)`; nothing on SQLite). A reclaim that fails or is not
//! permitted is logged and never fails the pass: the rows are pruned, and autovacuum
//! reclaims their space later.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::config::RetentionConfig;
use crate::store::{PrunedTable, Reclaim, RetentionStore, StoreError};

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
    /// Reclaim the pruned tables' space after a pass that deleted rows.
    pub vacuum: bool,
}

impl RetentionSettings {
    /// The settings of `[retention]`.
    pub fn from_config(config: &RetentionConfig) -> Self {
        Self {
            finished_after: config.finished_after,
            tombstone_after: config.tombstone_after,
            batch_size: config.batch_size,
            batch_pause: config.batch_pause,
            vacuum: config.vacuum,
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

/// How many times a full batch's own duration the pass pauses after it, at least.
pub const PAUSE_PER_BATCH_TIME: u32 = 2;

/// The pause after a full batch that took `took`: `batch_pause`, and at least
/// [`PAUSE_PER_BATCH_TIME`] × `took` while pausing is on (a zero `batch_pause` means no
/// pause at all), so a pass is busy at most a third of its time.
pub fn pause_after(took: Duration, batch_pause: Duration) -> Duration {
    if batch_pause.is_zero() {
        Duration::ZERO
    } else {
        batch_pause.max(took.saturating_mul(PAUSE_PER_BATCH_TIME))
    }
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
    /// Tables vacuumed after the pass (PostgreSQL with `retention.vacuum`, after a pass
    /// that deleted rows); empty otherwise.
    pub vacuumed: Vec<PrunedTable>,
}

/// The tables pruning intents deletes from: an intent takes its attempts and
/// reconciliation items with it.
pub const TABLES_PRUNING_INTENTS: [PrunedTable; 3] = [
    PrunedTable::Intents,
    PrunedTable::Attempts,
    PrunedTable::ReconciliationItems,
];

/// The tables a pass deleted from, as its report says ([`TABLES_PRUNING_INTENTS`];
/// expired tombstones are their own table).
pub fn pruned_tables(report: &RetentionReport) -> Vec<PrunedTable> {
    let mut tables = Vec::new();
    if report.intents_pruned > 0 {
        tables.extend(TABLES_PRUNING_INTENTS);
    }
    if report.tombstones_pruned > 0 {
        tables.push(PrunedTable::Tombstones);
    }
    tables
}

/// Asks the store to reclaim what the pass freed; logs and swallows every failure.
async fn reclaim_after(
    store: &(impl RetentionStore + ?Sized),
    tables: &[PrunedTable],
) -> Vec<PrunedTable> {
    let started = Instant::now();
    match store.reclaim(tables).await {
        Ok(Reclaim::NotNeeded) => Vec::new(),
        Ok(Reclaim::Vacuumed {
            vacuumed,
            not_permitted,
        }) => {
            if !not_permitted.is_empty() {
                let names: Vec<&str> = not_permitted.iter().map(|t| t.table()).collect();
                tracing::warn!(
                    tables = %names.join(", "),
                    "retention.vacuum: the database role may not vacuum these tables (only \
                     their owner, the database owner or, on PostgreSQL 17, a role granted \
                     MAINTAIN may); skipped, their pruned space waits for autovacuum. Run \
                     outboxd as the tables' owner, grant MAINTAIN, or set \
                     retention.vacuum = false"
                );
            }
            if !vacuumed.is_empty() {
                tracing::info!(
                    tables = ?vacuumed.iter().map(|t| t.table()).collect::<Vec<_>>(),
                    elapsed = ?started.elapsed(),
                    "vacuumed the tables the retention pass pruned"
                );
            }
            vacuumed
        }
        Err(error) => {
            tracing::warn!(%error, "vacuum after the retention pass failed; the rows stay \
                pruned and their space waits for autovacuum");
            Vec::new()
        }
    }
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
        vacuumed: Vec::new(),
    };
    let started = Instant::now();
    let mut last_progress = started;
    for phase in [Phase::Intents, Phase::Tombstones] {
        loop {
            let batch_started = Instant::now();
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
            let pause = pause_after(batch_started.elapsed(), settings.batch_pause);
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
        }
    }
    let pruned = pruned_tables(&report);
    if settings.vacuum && !pruned.is_empty() {
        report.vacuumed = reclaim_after(store, &pruned).await;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_pauses_at_least_twice_as_long_as_its_batch_took() {
        let ms = Duration::from_millis;
        assert_eq!(pause_after(ms(10), ms(50)), ms(50));
        assert_eq!(pause_after(ms(25), ms(50)), ms(50));
        assert_eq!(pause_after(ms(30), ms(50)), ms(60));
        assert_eq!(pause_after(ms(400), ms(50)), ms(800));
        assert_eq!(pause_after(ms(400), Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn a_pass_vacuums_the_tables_it_deleted_from() {
        let now = Utc::now();
        let report = |intents, tombstones| RetentionReport {
            finished_before: now,
            tombstones_before: now,
            intents_pruned: intents,
            batches: 1,
            tombstones_pruned: tombstones,
            tombstone_batches: 1,
            vacuumed: Vec::new(),
        };
        assert!(pruned_tables(&report(0, 0)).is_empty());
        assert_eq!(
            pruned_tables(&report(3, 0)),
            [
                PrunedTable::Intents,
                PrunedTable::Attempts,
                PrunedTable::ReconciliationItems
            ]
        );
        assert_eq!(pruned_tables(&report(0, 2)), [PrunedTable::Tombstones]);
        assert_eq!(pruned_tables(&report(1, 1)).len(), 4);
    }
}
