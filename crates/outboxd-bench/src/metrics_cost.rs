//! What the metrics refresh costs the database with a small and a large finished history:
//! the live-gauge statement ([`outboxd::store::LIVE_GAUGES_SQL_POSTGRES`], the one an idle
//! daemon's gauge leader runs every 5 s) timed from the client, and on PostgreSQL the CPU
//! its server backend used (read from `/proc/<pid>/schedstat` for that backend's pid, in
//! nanoseconds). For contrast, the full-table `GROUP BY state` count the gauges used
//! before. Target: the large history costs the same as the small one within noise.

use std::time::{Duration, Instant};

use chrono::Utc;
use sqlx::{Connection, PgConnection};

use super::report::Report;
use super::setup::{is_postgres, seed, seed_finished_fast, BenchDb};
use super::{BenchError, BenchOptions};
use outboxd::store::Database;

/// Finished rows of the small history.
pub const SMALL_HISTORY: usize = 1_000;
/// Due pending intents next to the history (an idle daemon's trickle).
const LIVE_ROWS: usize = 10;
/// The statement the gauges used before: every row, every scrape.
const FULL_COUNT_SQL: &str = "SELECT state, count(*) FROM outbox_intents GROUP BY state";
/// Runs of the old statement (seconds each on a large history).
const FULL_COUNT_RUNS: usize = 3;

/// One history size's figures.
struct Cost {
    refresh_ms: f64,
    backend_cpu_ms: Option<f64>,
    full_count_ms: f64,
}

/// Measures both history sizes and records the ratio.
pub async fn metrics_cost(options: &BenchOptions, report: &mut Report) -> Result<(), BenchError> {
    if options.metrics_rows == 0 {
        return Ok(());
    }
    report.section("metrics refresh cost (live gauges through partial indexes)");
    let refreshes = if options.metrics_rows <= 100_000 {
        300
    } else {
        3_000
    };
    let small = measure(options, SMALL_HISTORY, refreshes, report).await?;
    let large = measure(options, options.metrics_rows, refreshes, report).await?;
    report.value(
        "metrics_ratio",
        &format!(
            "refresh time, {} / {SMALL_HISTORY} finished rows   [target ~1]",
            options.metrics_rows
        ),
        large.refresh_ms / small.refresh_ms.max(1e-9),
        "x",
    );
    if let (Some(l), Some(s)) = (large.backend_cpu_ms, small.backend_cpu_ms) {
        report.value(
            "metrics_cpu_ratio",
            "backend CPU per refresh, large / small history   [target ~1]",
            l / s.max(1e-9),
            "x",
        );
    }
    report.value(
        "metrics_full_count_ratio",
        "old full-table count, large / small history (for contrast)",
        large.full_count_ms / small.full_count_ms.max(1e-9),
        "x",
    );
    Ok(())
}

async fn measure(
    options: &BenchOptions,
    finished: usize,
    refreshes: usize,
    report: &mut Report,
) -> Result<Cost, BenchError> {
    let bench = BenchDb::create(&options.database, &format!("metrics{finished}")).await?;
    let seeding = Instant::now();
    if is_postgres(&options.database) {
        seed_finished_fast(&bench.url, finished).await?;
    } else {
        seed(&bench.db, finished, 0, "delivered").await?;
    }
    seed(&bench.db, LIVE_ROWS, finished, "pending").await?;
    tracing::info!(finished, elapsed = ?seeding.elapsed(), "metrics bench seeded");
    let cost = if is_postgres(&options.database) {
        postgres_cost(&bench.url, refreshes).await?
    } else {
        sqlite_cost(&bench.db, refreshes).await?
    };
    let label = format!("{finished} finished rows");
    report.value(
        &format!("metrics_refresh_ms_{finished}"),
        &format!("live-gauge refresh, {label} (client time, mean of {refreshes})"),
        cost.refresh_ms * 1000.0,
        "us",
    );
    if let Some(cpu) = cost.backend_cpu_ms {
        report.value(
            &format!("metrics_cpu_ms_{finished}"),
            &format!("  PostgreSQL backend CPU per refresh, {label}"),
            cpu * 1000.0,
            "us",
        );
    }
    report.value(
        &format!("metrics_full_count_ms_{finished}"),
        &format!("  old full-table count per refresh, {label}"),
        cost.full_count_ms,
        "ms",
    );
    bench.drop_now().await;
    Ok(cost)
}

async fn postgres_cost(url: &str, refreshes: usize) -> Result<Cost, BenchError> {
    let mut conn = PgConnection::connect(url).await?;
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut conn)
        .await?;
    let pid = u32::try_from(pid).unwrap_or(0);
    // Warm the plan and the cache the way a running leader has them.
    for _ in 0..10 {
        live_gauges_pg(&mut conn).await?;
    }
    let cpu_before = super::cpu::process_seconds_precise(pid);
    let start = Instant::now();
    for _ in 0..refreshes {
        live_gauges_pg(&mut conn).await?;
    }
    let elapsed = start.elapsed();
    let cpu_after = super::cpu::process_seconds_precise(pid);
    let backend_cpu_ms = match (cpu_before, cpu_after) {
        (Some(b), Some(a)) => Some((a - b) * 1000.0 / refreshes as f64),
        _ => None,
    };
    let start = Instant::now();
    for _ in 0..FULL_COUNT_RUNS {
        sqlx::query(FULL_COUNT_SQL).fetch_all(&mut conn).await?;
    }
    let full_count_ms = per_call_ms(start.elapsed(), FULL_COUNT_RUNS);
    conn.close().await?;
    Ok(Cost {
        refresh_ms: per_call_ms(elapsed, refreshes),
        backend_cpu_ms,
        full_count_ms,
    })
}

async fn live_gauges_pg(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query(outboxd::store::LIVE_GAUGES_SQL_POSTGRES)
        .bind(Utc::now())
        .fetch_all(conn)
        .await
        .map(|_| ())
}

async fn sqlite_cost(db: &Database, refreshes: usize) -> Result<Cost, BenchError> {
    let store = db.store();
    let start = Instant::now();
    for _ in 0..refreshes {
        store.live_gauges(Utc::now()).await?;
    }
    let elapsed = start.elapsed();
    let Database::Sqlite(pool) = db else {
        return Err(BenchError::Failed("expected SQLite".into()));
    };
    let start = Instant::now();
    for _ in 0..FULL_COUNT_RUNS {
        sqlx::query(FULL_COUNT_SQL).fetch_all(pool).await?;
    }
    let full_count_ms = per_call_ms(start.elapsed(), FULL_COUNT_RUNS);
    Ok(Cost {
        refresh_ms: per_call_ms(elapsed, refreshes),
        backend_cpu_ms: None,
        full_count_ms,
    })
}

fn per_call_ms(elapsed: Duration, calls: usize) -> f64 {
    elapsed.as_secs_f64() * 1000.0 / calls.max(1) as f64
}
