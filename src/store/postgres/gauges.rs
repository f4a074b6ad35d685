//! The live gauges on PostgreSQL, computed by one replica at a time: the first replica to
//! take the session advisory lock `(0x6f627803, hashtext(current_schema()))` keeps it on a
//! connection of its own (detached from the pool) and reads the gauges on it; the others
//! see the lock taken and export nothing. If the holder dies its session ends, the lock is
//! free, and the next replica to refresh takes over. A failed read drops the connection
//! (and with it the lock).

use chrono::{DateTime, Utc};
use sqlx::{Connection, PgConnection, PgPool};
use tokio::sync::Mutex;

use crate::store::{GaugeRead, LiveGauges, StoreError, LIVE_GAUGES_SQL_POSTGRES};

/// The first half of the advisory lock key (after the job locks' 0x6f6278_01 and _02).
const GAUGE_LOCK_CLASS: i32 = 0x6f62_7803;
const TRY_LOCK_SQL: &str = "SELECT pg_try_advisory_lock($1, hashtext(current_schema()))";

/// The connection that holds the gauge lock, while this process holds it.
#[derive(Debug, Default)]
pub(super) struct GaugeLeader {
    conn: Mutex<Option<PgConnection>>,
}

impl GaugeLeader {
    pub(super) async fn read(
        &self,
        pool: &PgPool,
        now: DateTime<Utc>,
    ) -> Result<GaugeRead, StoreError> {
        let mut slot = self.conn.lock().await;
        if slot.is_none() {
            let mut conn = pool.acquire().await?;
            let acquired: bool = sqlx::query_scalar(TRY_LOCK_SQL)
                .bind(GAUGE_LOCK_CLASS)
                .fetch_one(&mut *conn)
                .await?;
            if !acquired {
                return Ok(GaugeRead::OtherReplica);
            }
            // Keep the session (and so the lock) out of the pool's rotation.
            *slot = Some(conn.detach());
        }
        let conn = slot.as_mut().expect("set above");
        match read_on(conn, now).await {
            Ok(gauges) => Ok(GaugeRead::Read(gauges)),
            Err(e) => {
                if let Some(conn) = slot.take() {
                    // Ends the session, which frees the lock for another replica.
                    let _ = conn.close().await;
                }
                Err(e)
            }
        }
    }
}

async fn read_on(conn: &mut PgConnection, now: DateTime<Utc>) -> Result<LiveGauges, StoreError> {
    let rows: Vec<(String, String, i64, Option<DateTime<Utc>>)> =
        sqlx::query_as(LIVE_GAUGES_SQL_POSTGRES)
            .bind(now)
            .fetch_all(&mut *conn)
            .await?;
    Ok(LiveGauges::from_rows(rows))
}
