//! The published provider states on SQLite (`outbox_provider_states`, times in ms): each
//! daemon replaces its own rows; anyone reads them. Small, bounded writes off the hot path.

use chrono::{DateTime, Utc};
use sqlx::SqlitePool;

use super::{from_ms, ms};
use crate::store::{ProviderStateRow, StoreError};

/// Replaces `owner`'s rows and forgets rows older than `forget_before`, in one transaction.
/// On error nothing changes (the previous rows stay, showing their age).
pub(super) async fn publish(
    pool: &SqlitePool,
    owner: &str,
    states: &[ProviderStateRow],
    forget_before: DateTime<Utc>,
) -> Result<(), StoreError> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    sqlx::query("DELETE FROM outbox_provider_states WHERE owner = ?1 OR updated_at < ?2")
        .bind(owner)
        .bind(ms(forget_before))
        .execute(&mut *tx)
        .await?;
    for s in states {
        sqlx::query(
            "INSERT INTO outbox_provider_states (owner, provider, in_flight, max_in_flight, \
             rate_limited_waits, breaker, breaker_open_until, paused_until, updated_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )
        .bind(owner)
        .bind(&s.provider)
        .bind(s.in_flight)
        .bind(s.max_in_flight)
        .bind(s.rate_limited_waits)
        .bind(&s.breaker)
        .bind(s.breaker_open_until.map(ms))
        .bind(s.paused_until.map(ms))
        .bind(ms(s.updated_at))
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Deletes `owner`'s rows.
pub(super) async fn withdraw(pool: &SqlitePool, owner: &str) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM outbox_provider_states WHERE owner = ?1")
        .bind(owner)
        .execute(pool)
        .await?;
    Ok(())
}

/// One stored row: owner, provider, in flight, max in flight, rate-limited waits, breaker,
/// breaker open until, paused until, updated at.
type Row = (
    String,
    String,
    i64,
    i64,
    i64,
    String,
    Option<i64>,
    Option<i64>,
    i64,
);

/// Every row, by provider then owner.
pub(super) async fn list(pool: &SqlitePool) -> Result<Vec<ProviderStateRow>, StoreError> {
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT owner, provider, in_flight, max_in_flight, rate_limited_waits, breaker, \
         breaker_open_until, paused_until, updated_at FROM outbox_provider_states \
         ORDER BY provider, owner",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| ProviderStateRow {
            owner: r.0,
            provider: r.1,
            in_flight: r.2,
            max_in_flight: r.3,
            rate_limited_waits: r.4,
            breaker: r.5,
            breaker_open_until: r.6.map(from_ms),
            paused_until: r.7.map(from_ms),
            updated_at: from_ms(r.8),
        })
        .collect())
}
