//! (8) Producer overhead: a business transaction (one business row) plus `enqueue`,
//! against the same transaction plus a plain `INSERT` of the same payload into an
//! unindexed table; commits per second of each, one connection, sequential.
//!
//! (8b) The same transactions from [`PARALLEL`] connections at once (PostgreSQL), and
//! `enqueue` with the wake-up turned off (`SET LOCAL outboxd.wake_dispatchers = off`,
//! migration 0013): PostgreSQL serializes the commits of transactions that notify, which
//! one sequential connection never shows.

use std::time::Instant;

use super::report::Report;
use super::setup::{BenchDb, ACTION};
use super::{BenchError, BenchOptions};
use outboxd::store::Database;
use outboxd::{enqueue, NewIntent};

fn payload(n: usize) -> serde_json::Value {
    serde_json::json!({"order_id": n, "amount": 1250, "currency": "EUR", "note": "x".repeat(160)})
}

async fn pg(pool: &sqlx::PgPool, commits: usize, with_enqueue: bool) -> Result<f64, BenchError> {
    let start = Instant::now();
    for n in 0..commits {
        let mut tx = pool.begin().await?;
        sqlx::query("INSERT INTO bench_orders (id, note) VALUES ($1, 'refund requested')")
            .bind(n as i64 + if with_enqueue { 0 } else { 10_000_000 })
            .execute(&mut *tx)
            .await?;
        if with_enqueue {
            enqueue(
                &mut tx,
                NewIntent::new("bench", format!("p-{n}"), ACTION, payload(n)),
            )
            .await
            .map_err(|e| BenchError::Failed(e.to_string()))?;
        } else {
            sqlx::query("INSERT INTO bench_plain_outbox (payload) VALUES ($1)")
                .bind(sqlx::types::Json(payload(n)))
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
    }
    Ok(commits as f64 / start.elapsed().as_secs_f64())
}

async fn sqlite(
    pool: &sqlx::SqlitePool,
    commits: usize,
    with_enqueue: bool,
) -> Result<f64, BenchError> {
    let start = Instant::now();
    for n in 0..commits {
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
        sqlx::query("INSERT INTO bench_orders (id, note) VALUES (?1, 'refund requested')")
            .bind(n as i64 + if with_enqueue { 0 } else { 10_000_000 })
            .execute(&mut *tx)
            .await?;
        if with_enqueue {
            enqueue(
                &mut tx,
                NewIntent::new("bench", format!("p-{n}"), ACTION, payload(n)),
            )
            .await
            .map_err(|e| BenchError::Failed(e.to_string()))?;
        } else {
            sqlx::query("INSERT INTO bench_plain_outbox (payload) VALUES (?1)")
                .bind(payload(n).to_string())
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
    }
    Ok(commits as f64 / start.elapsed().as_secs_f64())
}

/// Measures both variants (plain first, then enqueue, then plain again; the plain figure is
/// the mean of its two runs so drift does not favour either side).
pub async fn overhead(options: &BenchOptions, report: &mut Report) -> Result<(), BenchError> {
    let bench = BenchDb::create(&options.database, "producer").await?;
    let n = options.producer_commits;
    let (plain_a, with_enqueue, plain_b) = match &bench.db {
        Database::Postgres(pool) => {
            pg_tables(pool).await?;
            (
                pg(pool, n / 2, false).await?,
                pg(pool, n, true).await?,
                pg_again(pool, n / 2).await?,
            )
        }
        Database::Sqlite(pool) => {
            sqlx::query("CREATE TABLE bench_orders (id INTEGER PRIMARY KEY, note TEXT)")
                .execute(pool)
                .await?;
            sqlx::query("CREATE TABLE bench_plain_outbox (payload TEXT NOT NULL)")
                .execute(pool)
                .await?;
            let a = sqlite(pool, n / 2, false).await?;
            let e = sqlite(pool, n, true).await?;
            sqlx::query("DELETE FROM bench_orders WHERE id >= 10000000")
                .execute(pool)
                .await?;
            (a, e, sqlite(pool, n / 2, false).await?)
        }
    };
    report.value(
        "producer_plain",
        "(8) producer: business row + plain INSERT, commits/s",
        (plain_a + plain_b) / 2.0,
        "commits/s",
    );
    report.value(
        "producer_enqueue",
        "(8) producer: business row + enqueue, commits/s",
        with_enqueue,
        "commits/s",
    );
    bench.drop_now().await;
    Ok(())
}

/// Connections of the parallel producer run (8b).
pub const PARALLEL: usize = 8;

/// What each transaction of the parallel run writes beside its business row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Beside {
    Plain,
    Enqueue,
    EnqueueQuiet,
}

/// `commits` transactions over [`PARALLEL`] connections at once; commits per second.
/// `round` keeps the business rows' ids of each run apart.
async fn pg_parallel(
    pool: &sqlx::PgPool,
    commits: usize,
    beside: Beside,
    round: i64,
) -> Result<f64, BenchError> {
    let per = (commits / PARALLEL).max(1);
    let start = Instant::now();
    let tasks: Vec<_> = (0..PARALLEL)
        .map(|c| {
            let pool = pool.clone();
            tokio::spawn(async move {
                for n in 0..per {
                    let id = 100_000_000 * (round + 1) + (c * per + n) as i64;
                    let mut tx = pool.begin().await?;
                    sqlx::query(
                        "INSERT INTO bench_orders (id, note) VALUES ($1, 'refund requested')",
                    )
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                    if beside == Beside::Plain {
                        sqlx::query("INSERT INTO bench_plain_outbox (payload) VALUES ($1)")
                            .bind(sqlx::types::Json(payload(n)))
                            .execute(&mut *tx)
                            .await?;
                    } else {
                        // Both variants set it, so they differ in the wake-up alone.
                        let wake = match beside {
                            Beside::EnqueueQuiet => "SET LOCAL outboxd.wake_dispatchers = off",
                            _ => "SET LOCAL outboxd.wake_dispatchers = on",
                        };
                        sqlx::query(wake).execute(&mut *tx).await?;
                        let op = format!("pp-{id}");
                        enqueue(&mut tx, NewIntent::new("bench", op, ACTION, payload(n)))
                            .await
                            .map_err(|e| BenchError::Failed(e.to_string()))?;
                    }
                    tx.commit().await?;
                }
                Ok::<(), BenchError>(())
            })
        })
        .collect();
    for t in tasks {
        t.await.map_err(|e| BenchError::Failed(e.to_string()))??;
    }
    Ok((per * PARALLEL) as f64 / start.elapsed().as_secs_f64())
}

/// (8b) on PostgreSQL: each variant twice, in a balanced order (plain, enqueue, quiet,
/// quiet, enqueue, plain), each figure the mean of its two runs.
pub async fn parallel(options: &BenchOptions, report: &mut Report) -> Result<(), BenchError> {
    let bench = BenchDb::create(&options.database, "producer_parallel").await?;
    let Database::Postgres(pool) = &bench.db else {
        return Ok(());
    };
    pg_tables(pool).await?;
    let n = options.producer_commits;
    let order = [
        Beside::Plain,
        Beside::Enqueue,
        Beside::EnqueueQuiet,
        Beside::EnqueueQuiet,
        Beside::Enqueue,
        Beside::Plain,
    ];
    let mut sums = [0.0f64; 3];
    for (round, beside) in order.into_iter().enumerate() {
        let rate = pg_parallel(pool, n, beside, round as i64).await?;
        sums[beside as usize] += rate / 2.0;
    }
    let [plain, loud, quiet] = sums;
    for (key, label, value) in [
        (
            "producer_parallel_plain",
            "business row + plain INSERT",
            plain,
        ),
        ("producer_parallel_enqueue", "business row + enqueue", loud),
        (
            "producer_parallel_quiet",
            "business row + enqueue, wake-up off",
            quiet,
        ),
    ] {
        report.value(
            key,
            &format!("(8b) producer, {PARALLEL} connections: {label}, commits/s"),
            value,
            "commits/s",
        );
    }
    report.ratio(
        "producer_parallel_enqueue_ratio",
        &format!("(8b) {PARALLEL} connections: enqueue / plain INSERT"),
        loud / plain,
    );
    report.ratio(
        "producer_parallel_quiet_ratio",
        &format!("(8b) {PARALLEL} connections: enqueue with the wake-up off / plain INSERT"),
        quiet / plain,
    );
    bench.drop_now().await;
    Ok(())
}

/// The business table and the plain outbox table of the PostgreSQL runs.
async fn pg_tables(pool: &sqlx::PgPool) -> Result<(), BenchError> {
    sqlx::query("CREATE TABLE bench_orders (id BIGINT PRIMARY KEY, note TEXT)")
        .execute(pool)
        .await?;
    sqlx::query("CREATE TABLE bench_plain_outbox (payload JSONB NOT NULL)")
        .execute(pool)
        .await?;
    Ok(())
}

async fn pg_again(pool: &sqlx::PgPool, commits: usize) -> Result<f64, BenchError> {
    sqlx::query("DELETE FROM bench_orders WHERE id >= 10000000")
        .execute(pool)
        .await?;
    pg(pool, commits, false).await
}
