//! Figures read back from the database after (or while) the daemon ran: counts, drain
//! spans per action, first attempt starts per operation, and percentiles. Times are
//! milliseconds since the epoch as `f64` on both backends.

use sqlx::AssertSqlSafe;
use std::time::{Duration, Instant};

use super::BenchError;
use outboxd::store::Database;

/// One integer from `sql` (a `count(*)`).
pub async fn count(db: &Database, sql: &str) -> Result<i64, BenchError> {
    Ok(match db {
        Database::Postgres(pool) => {
            sqlx::query_scalar(AssertSqlSafe(sql))
                .fetch_one(pool)
                .await?
        }
        Database::Sqlite(pool) => {
            sqlx::query_scalar(AssertSqlSafe(sql))
                .fetch_one(pool)
                .await?
        }
    })
}

/// Runs one statement.
pub async fn exec(db: &Database, sql: &str) -> Result<(), BenchError> {
    match db {
        Database::Postgres(pool) => {
            sqlx::query(AssertSqlSafe(sql)).execute(pool).await?;
        }
        Database::Sqlite(pool) => {
            sqlx::query(AssertSqlSafe(sql)).execute(pool).await?;
        }
    }
    Ok(())
}

/// Waits until `sql` counts at least `n`, polling every 50 ms, for at most `limit`.
pub async fn wait_count(
    db: &Database,
    sql: &str,
    n: i64,
    limit: Duration,
) -> Result<(), BenchError> {
    let until = Instant::now() + limit;
    loop {
        let now = count(db, sql).await?;
        if now >= n {
            return Ok(());
        }
        if Instant::now() >= until {
            return Err(BenchError::Failed(format!(
                "waited {limit:?} for {n} rows of `{sql}`, saw {now}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `count(*)` of delivered intents of `action`.
pub fn delivered_sql(action: &str) -> String {
    format!("SELECT count(*) FROM outbox_intents WHERE state = 'delivered' AND action = '{action}'")
}

/// The rate (per second) at which `action` was delivered: its `n` deliveries over the
/// span from the first attempt of any action to its `n`-th delivery.
pub async fn delivery_rate(db: &Database, action: &str, n: usize) -> Result<f64, BenchError> {
    let offset = n.saturating_sub(1);
    let sql_pg = format!(
        "SELECT (SELECT extract(epoch FROM min(started_at)) * 1000 FROM outbox_attempts)::float8, \
         (SELECT extract(epoch FROM a.ended_at) * 1000 FROM outbox_attempts a JOIN outbox_intents i \
          ON i.id = a.intent_id WHERE a.class = 'delivered' AND i.action = '{action}' \
          ORDER BY a.ended_at LIMIT 1 OFFSET {offset})::float8"
    );
    let sql_lite = format!(
        "SELECT CAST((SELECT min(started_at) FROM outbox_attempts) AS REAL), \
         CAST((SELECT a.ended_at FROM outbox_attempts a JOIN outbox_intents i ON i.id = a.intent_id \
          WHERE a.class = 'delivered' AND i.action = '{action}' ORDER BY a.ended_at LIMIT 1 OFFSET {offset}) AS REAL)"
    );
    let (first, nth): (Option<f64>, Option<f64>) = match db {
        Database::Postgres(pool) => {
            sqlx::query_as(AssertSqlSafe(sql_pg.as_str()))
                .fetch_one(pool)
                .await?
        }
        Database::Sqlite(pool) => {
            sqlx::query_as(AssertSqlSafe(sql_lite.as_str()))
                .fetch_one(pool)
                .await?
        }
    };
    match (first, nth) {
        (Some(a), Some(b)) => Ok(n as f64 * 1000.0 / (b - a).max(1.0)),
        _ => Err(BenchError::Failed(format!(
            "fewer than {n} deliveries of {action} recorded"
        ))),
    }
}

/// Per operation of `tenant`: the first attempt's start (ms since the epoch).
pub async fn first_attempts(db: &Database, tenant: &str) -> Result<Vec<(String, f64)>, BenchError> {
    Ok(match db {
        Database::Postgres(pool) => {
            sqlx::query_as(
                "SELECT i.operation_id, (extract(epoch FROM min(a.started_at)) * 1000)::float8 \
             FROM outbox_intents i JOIN outbox_attempts a ON a.intent_id = i.id \
             WHERE i.tenant = $1 GROUP BY i.operation_id",
            )
            .bind(tenant)
            .fetch_all(pool)
            .await?
        }
        Database::Sqlite(pool) => {
            sqlx::query_as(
                "SELECT i.operation_id, CAST(min(a.started_at) AS REAL) \
             FROM outbox_intents i JOIN outbox_attempts a ON a.intent_id = i.id \
             WHERE i.tenant = ?1 GROUP BY i.operation_id",
            )
            .bind(tenant)
            .fetch_all(pool)
            .await?
        }
    })
}

/// Now as milliseconds since the epoch.
pub fn now_ms() -> f64 {
    chrono::Utc::now().timestamp_micros() as f64 / 1000.0
}

/// The `p` quantile (0–1) of `sorted` (nearest rank); NaN when empty.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// Sorts `values` for [`percentile`].
pub fn sorted(mut values: Vec<f64>) -> Vec<f64> {
    values.sort_by(f64::total_cmp);
    values
}

/// The median of `rates` (the middle pair averaged for an even count; 0 when empty).
pub fn median(rates: &mut [f64]) -> f64 {
    rates.sort_by(f64::total_cmp);
    match rates.len() {
        0 => 0.0,
        n if n % 2 == 1 => rates[n / 2],
        n => (rates[n / 2 - 1] + rates[n / 2]) / 2.0,
    }
}

/// `lo–hi/s` of `rates`, for a report line.
pub fn spread(rates: &[f64]) -> String {
    let (lo, hi) = rates
        .iter()
        .fold((f64::MAX, 0.0f64), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
    format!("{lo:.0}–{hi:.0}/s")
}
