//! The live gauges on SQLite (one dispatcher per file: no lock, this process computes).

use chrono::{DateTime, Utc};
use sqlx::SqlitePool;

use super::{from_ms, ms};
use crate::store::{GaugeRead, LiveGauges, StoreError, LIVE_GAUGES_SQL_SQLITE};

pub(super) async fn read(pool: &SqlitePool, now: DateTime<Utc>) -> Result<GaugeRead, StoreError> {
    let rows: Vec<(String, String, i64, Option<i64>)> = sqlx::query_as(LIVE_GAUGES_SQL_SQLITE)
        .bind(ms(now))
        .fetch_all(pool)
        .await?;
    Ok(GaugeRead::Read(LiveGauges::from_rows(
        rows.into_iter()
            .map(|(kind, action, n, at)| (kind, action, n, at.map(from_ms))),
    )))
}
