//! (8) Producer overhead: a business transaction (one business row) plus `enqueue`,
//! against the same transaction plus a plain `INSERT` of the same payload into an
//! unindexed table; commits per second of each, one connection, sequential.

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
            sqlx::query("CREATE TABLE bench_orders (id BIGINT PRIMARY KEY, note TEXT)")
                .execute(pool)
                .await?;
            sqlx::query("CREATE TABLE bench_plain_outbox (payload JSONB NOT NULL)")
                .execute(pool)
                .await?;
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

async fn pg_again(pool: &sqlx::PgPool, commits: usize) -> Result<f64, BenchError> {
    sqlx::query("DELETE FROM bench_orders WHERE id >= 10000000")
        .execute(pool)
        .await?;
    pg(pool, commits, false).await
}
