//! Retention at scale: dispatch throughput while a retention pass prunes a large finished
//! history (target ≥ 0.8 of the throughput without pruning, same history present), and
//! the outbox table's size (table + indexes) over retention windows of steady load
//! (target: after three windows within 1.5× of after one).
//!
//! Both use the real retention pass ([`run_retention_once`], default batch size and pause)
//! and, for throughput, the real dispatcher in this process delivering to the loopback
//! provider. The size run inserts each window's rows as the dispatcher leaves them
//! (delivered, finished at the window's simulated time) and prunes with a simulated clock;
//! PostgreSQL only (SQLite files do not shrink without `VACUUM` either way).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use sqlx::Connection;

use super::measure::{median, spread};
use super::report::Report;
use super::setup::{insert_finished, is_postgres, seed, seed_finished_fast, BenchDb, ACTION};
use super::{BenchError, BenchOptions};
use outboxd::action::{RetryPolicy, RetrySafety};
use outboxd::dispatch::{ActionRuntime, ActionTable, Dispatcher, DispatcherSettings};
use outboxd::reconcile::retention::{DEFAULT_BATCH_SIZE, TABLES_PRUNING_INTENTS};
use outboxd::reconcile::{
    run_retention_observed, run_retention_once, RetentionBatch, RetentionSettings,
};
use outboxd::store::Database;
use outboxd_testkit::FakeProvider;

/// Intents dispatched in each throughput run.
fn dispatched(options: &BenchOptions) -> usize {
    options.intents.clamp(200, 20_000)
}

fn actions(provider: &FakeProvider) -> Result<Arc<ActionTable>, BenchError> {
    let client = Arc::new(super::ceilings::client(provider)?);
    Ok(Arc::new(ActionTable::new([ActionRuntime {
        name: ACTION.to_owned(),
        client,
        method: reqwest::Method::POST,
        path: "/keyed/bench".to_owned(),
        retry_safety: RetrySafety::IdempotentWithKey,
        reference_pointer: None,
        policy: RetryPolicy::default(),
        key_retention: Duration::from_secs(86_400),
        probe: None,
    }])))
}

fn dispatcher(db: &Database, actions: Arc<ActionTable>) -> Dispatcher {
    Dispatcher::new(
        db.claim_store(),
        actions,
        DispatcherSettings {
            owner: "bench-retention".into(),
            batch_size: 64,
            concurrency: 64,
            lease: Duration::from_secs(90),
            poll_interval: Duration::from_millis(100),
            shutdown_grace: Duration::from_secs(5),
            reclaim_every: Duration::from_secs(5),
        },
    )
}

/// Prunes everything finished before the pass starts, with the default batch, pause and
/// vacuum setting.
fn prune_everything() -> RetentionSettings {
    let defaults = outboxd::config::RetentionConfig::default();
    RetentionSettings {
        finished_after: Duration::ZERO,
        tombstone_after: Duration::from_secs(400 * 86_400),
        batch_size: DEFAULT_BATCH_SIZE,
        batch_pause: defaults.batch_pause,
        vacuum: defaults.vacuum,
    }
}

/// Quiet and pruning drains each, alternated (one of each in a smoke run): a single pair
/// measured the machine's drift more than the pass.
const PRUNING_ROUNDS: usize = 3;

/// Throughput of draining fresh intents next to `prune_rows` finished ones, without and
/// while a retention pass prunes them: rounds of a quiet drain, then a drain with a pass
/// running (started just before it, stopped just after, so the next quiet drain is quiet
/// and the next pass goes on with the rows still old). Compared as medians.
pub async fn throughput_while_pruning(
    options: &BenchOptions,
    provider: &FakeProvider,
    report: &mut Report,
) -> Result<(), BenchError> {
    if options.prune_rows == 0 {
        return Ok(());
    }
    report.section("dispatch while pruning");
    let bench = BenchDb::create(&options.database, "pruning").await?;
    let history = options.prune_rows;
    let n = dispatched(options);
    if is_postgres(&options.database) {
        seed_finished_fast(&bench.url, history).await?;
    } else {
        seed(&bench.db, history, 0, "delivered").await?;
    }
    let actions = actions(provider)?;
    let rounds = if options.smoke { 1 } else { PRUNING_ROUNDS };
    let (mut quiet, mut busy) = (Vec::new(), Vec::new());
    let pruned = Arc::new(AtomicU64::new(0));
    let (mut pruning_time, mut pass_ended) = (Duration::ZERO, false);
    let mut next_id = history;
    for _ in 0..rounds {
        seed(&bench.db, n, next_id, "pending").await?;
        next_id += n;
        let start = Instant::now();
        let drained = dispatcher(&bench.db, actions.clone()).drain().await?;
        quiet.push(drained.delivered as f64 / start.elapsed().as_secs_f64().max(1e-9));

        seed(&bench.db, n, next_id, "pending").await?;
        next_id += n;
        let store = bench.db.store();
        let counted = pruned.clone();
        let pass = tokio::spawn(async move {
            let mut on_batch = |batch: RetentionBatch| {
                if let RetentionBatch::Intents(n) = batch {
                    counted.fetch_add(n, Ordering::Relaxed);
                }
            };
            run_retention_observed(
                store.as_ref(),
                &prune_everything(),
                Utc::now(),
                &mut on_batch,
            )
            .await
        });
        let start = Instant::now();
        let drained = dispatcher(&bench.db, actions.clone()).drain().await?;
        let elapsed = start.elapsed();
        pass_ended |= pass.is_finished();
        // The figure is about the drain; the rest of the pass is not waited for. A pass
        // that failed would make this a quiet drain: that is an error, not a figure.
        pass.abort();
        match pass.await {
            Ok(Err(e)) => {
                return Err(BenchError::Failed(format!(
                    "the retention pass failed during the drain: {e}"
                )))
            }
            Ok(Ok(_)) => {}
            Err(aborted) if aborted.is_cancelled() => {}
            Err(e) => {
                return Err(BenchError::Failed(format!(
                    "the retention pass panicked: {e}"
                )))
            }
        }
        pruning_time += elapsed;
        busy.push(drained.delivered as f64 / elapsed.as_secs_f64().max(1e-9));
        // An aborted pass never reaches its own reclaim (VACUUM on PostgreSQL): do it
        // here, outside the timed drains, so dead rows of this round do not land on the
        // next quiet drain.
        bench
            .db
            .retention_store()
            .reclaim(&TABLES_PRUNING_INTENTS)
            .await?;
    }
    println!(
        "   pruning: {rounds} round(s) of {n} intents; quiet drains {}, drains while pruning {}",
        spread(&quiet),
        spread(&busy)
    );
    let (quiet_median, busy_median) = (median(&mut quiet), median(&mut busy));
    report.value(
        "prune_quiet",
        &format!("dispatch, {history} finished rows at the start, no pruning (median)"),
        quiet_median,
        "per s",
    );
    report.value(
        "prune_busy",
        &format!("dispatch while a retention pass prunes {history} rows (median)"),
        busy_median,
        "per s",
    );
    report.rate(
        "prune_rate",
        &format!(
            "  rows pruned per s meanwhile (batches of {DEFAULT_BATCH_SIZE}{})",
            if pass_ended {
                "; a pass ended before its drain did"
            } else {
                ""
            }
        ),
        usize::try_from(pruned.load(Ordering::Relaxed)).unwrap_or(usize::MAX),
        pruning_time,
    );
    report.ratio(
        "prune_ratio",
        "dispatch while pruning / without, medians   [target >= 0.8]",
        busy_median / quiet_median.max(1e-9),
    );
    bench.drop_now().await;
    Ok(())
}

/// Table + index size of `outbox_intents` over four windows of steady load, each window's
/// rows pruned one window later. Run twice: as shipped (`retention.vacuum = true`, the
/// pass vacuums what it pruned; autovacuum as the server leaves it), the figure the target
/// is about, and with `retention.vacuum = false` (autovacuum alone) for comparison.
pub async fn size_over_windows(
    options: &BenchOptions,
    report: &mut Report,
) -> Result<(), BenchError> {
    if options.prune_rows == 0 || !is_postgres(&options.database) {
        return Ok(());
    }
    report.section("table size over retention windows (PostgreSQL)");
    let shipped = outboxd::config::RetentionConfig::default().vacuum;
    for vacuum in [shipped, !shipped] {
        let per_window = (options.prune_rows / 50).max(1_000);
        let bench = BenchDb::create(&options.database, "bloat").await?;
        let Database::Postgres(pool) = &bench.db else {
            unreachable!("checked above");
        };
        let store = bench.db.store();
        let window = chrono::Duration::hours(1);
        let settings = RetentionSettings {
            finished_after: Duration::from_secs(3600),
            vacuum,
            ..prune_everything()
        };
        let t0 = Utc::now() - chrono::Duration::days(1);
        let mut sizes = Vec::new();
        // The load's rows as the dispatcher leaves them, with the schema's triggers off for
        // this session (seeding speed only; nothing they check is at stake).
        let mut load = sqlx::PgConnection::connect(&bench.url).await?;
        sqlx::query("SET session_replication_role = replica")
            .execute(&mut load)
            .await?;
        for w in 0..4 {
            let at = t0 + window * w;
            insert_finished(&mut load, per_window * w as usize, per_window, at).await?;
            run_retention_once(store.as_ref(), &settings, at + chrono::Duration::seconds(1))
                .await?;
            let size: i64 = sqlx::query_scalar("SELECT pg_total_relation_size('outbox_intents')")
                .fetch_one(pool)
                .await?;
            sizes.push(size as f64 / 1_048_576.0);
        }
        load.close().await?;
        let how = match (vacuum, vacuum == shipped) {
            (true, true) => "vacuum = true, as shipped",
            (false, true) => "vacuum = false, as shipped",
            (true, false) => "vacuum = true, for comparison",
            (false, false) => "vacuum = false, autovacuum only",
        };
        let key = if vacuum { "bloat_vacuum" } else { "bloat_auto" };
        let target = if vacuum == shipped {
            "   [target <= 1.5]"
        } else {
            ""
        };
        report.value(
            &format!("{key}_one"),
            &format!("table + indexes after one window of {per_window} rows ({how})"),
            sizes[1],
            "MB",
        );
        report.value(
            &format!("{key}_three"),
            &format!("  after three more windows ({how})"),
            sizes[3],
            "MB",
        );
        report.ratio(
            &format!("{key}_ratio"),
            &format!("  size after three windows / after one ({how}){target}"),
            sizes[3] / sizes[1].max(1e-9),
        );
        bench.drop_now().await;
    }
    Ok(())
}
