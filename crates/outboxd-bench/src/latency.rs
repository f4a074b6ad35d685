//! Latency under a steady offered load (PostgreSQL): producers commit intents at a fixed
//! rate while the daemon runs; the commit → attempt start and commit → outcome recorded
//! percentiles come from the commit instants the producers saw and the times the daemon
//! recorded; response received → outcome durable comes from [`super::durable`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::report::Report;
use super::setup::{BenchDb, ACTION};
use super::{BenchError, BenchOptions};
use outboxd::store::Database;
use outboxd::{enqueue, NewIntent};
use outboxd_testkit::FakeProvider;

const PRODUCERS: u32 = 4;

async fn produce(
    pool: sqlx::PgPool,
    worker: u32,
    per_second: u32,
    total: u32,
    commits: Arc<Mutex<HashMap<String, DateTime<Utc>>>>,
) -> Result<(), BenchError> {
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(per_second)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    for n in 0..total {
        tick.tick().await;
        let op = format!("lat-{worker}-{n}");
        let mut tx = pool.begin().await?;
        let intent = NewIntent::new(
            "bench",
            op.clone(),
            ACTION,
            serde_json::json!({"n": n, "amount": 1250, "note": "x".repeat(160)}),
        );
        enqueue(&mut tx, intent)
            .await
            .map_err(|e| BenchError::Failed(e.to_string()))?;
        tx.commit().await?;
        commits
            .lock()
            .map_err(|_| BenchError::Failed("lock".into()))?
            .insert(op, Utc::now());
    }
    Ok(())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// (5) Runs the offered load and records the percentiles.
pub async fn offered_load(
    options: &BenchOptions,
    provider: &FakeProvider,
    report: &mut Report,
) -> Result<(), BenchError> {
    let bench = BenchDb::create(&options.database, "latency").await?;
    let Database::Postgres(pool) = &bench.db else {
        return Ok(());
    };
    let durable = super::durable::Durable::install(pool, provider).await?;
    let daemon = super::e2e::start_for_latency(options, &bench.url, provider)?;
    // Let the daemon start (LISTEN registered) before the first commit.
    super::e2e::wait_ready(&bench.db, Duration::from_secs(30)).await?;
    let per_worker = options.offered_rate / PRODUCERS;
    let total = per_worker * options.offered_for.as_secs() as u32;
    let commits = Arc::new(Mutex::new(HashMap::new()));
    let tasks: Vec<_> = (0..PRODUCERS)
        .map(|w| tokio::spawn(produce(pool.clone(), w, per_worker, total, commits.clone())))
        .collect();
    for t in tasks {
        t.await.map_err(|e| BenchError::Failed(e.to_string()))??;
    }
    let expected = (total * PRODUCERS) as usize;
    super::e2e::wait_all_finished(&bench.db, expected, Duration::from_secs(120)).await?;
    daemon.stop();
    let mut durable = durable.finish(pool, provider).await?;
    durable.sort_by(f64::total_cmp);
    let rows: Vec<(String, DateTime<Utc>, DateTime<Utc>)> = sqlx::query_as(
        "SELECT i.operation_id, min(a.started_at), i.finished_at FROM outbox_intents i \
         JOIN outbox_attempts a ON a.intent_id = i.id WHERE i.finished_at IS NOT NULL \
         GROUP BY i.operation_id, i.finished_at",
    )
    .fetch_all(pool)
    .await?;
    let commits: HashMap<String, DateTime<Utc>> = std::mem::take(
        &mut *commits
            .lock()
            .map_err(|_| BenchError::Failed("lock".into()))?,
    );
    let ms = |d: chrono::Duration| d.num_microseconds().unwrap_or(0) as f64 / 1000.0;
    let mut start: Vec<f64> = Vec::new();
    let mut done: Vec<f64> = Vec::new();
    for (op, started, finished) in rows {
        if let Some(committed) = commits.get(&op) {
            start.push(ms(started - *committed).max(0.0));
            done.push(ms(finished - *committed).max(0.0));
        }
    }
    start.sort_by(f64::total_cmp);
    done.sort_by(f64::total_cmp);
    let rate = options.offered_rate;
    for (key, series, what) in [
        ("lat_start", &start, "commit → attempt start"),
        ("lat_done", &done, "commit → outcome recorded"),
    ] {
        for (p, name) in [(0.5, "p50"), (0.95, "p95"), (0.99, "p99")] {
            report.value(
                &format!("{key}_{name}"),
                &format!("(5) {what} {name} at {rate}/s offered"),
                percentile(series, p),
                "ms",
            );
        }
    }
    for (p, name) in [(0.5, "p50"), (0.99, "p99")] {
        report.value(
            &format!("lat_durable_{name}"),
            &format!("(5) response received → outcome durable {name} at {rate}/s offered"),
            percentile(&durable, p),
            "ms",
        );
    }
    bench.drop_now().await;
    Ok(())
}
