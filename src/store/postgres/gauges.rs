//! The live gauges on PostgreSQL, computed by one replica at a time: the first replica to
//! take the session advisory lock `(0x6f627803, hashtext(current_schema()))` keeps it on a
//! connection of its own (detached from the pool) and reads the gauges on it; the others
//! see the lock taken and export nothing. If the holder dies its session ends, the lock is
//! free, and the next replica to refresh takes over. A failed read drops the connection
//! (and with it the lock). The try-lock runs on a connection already detached from the
//! pool, so no pooled session can ever hold the lock, not even after a cancelled refresh;
//! a follower keeps its detached session to ask again at the next refresh.

use chrono::{DateTime, Utc};
use sqlx::{Connection, PgConnection, PgPool};
use tokio::sync::Mutex;

use crate::store::{GaugeRead, LiveGauges, StoreError, LIVE_GAUGES_SQL_POSTGRES};

/// The first half of the advisory lock key (after the job locks' 0x6f6278_01 and _02).
const GAUGE_LOCK_CLASS: i32 = 0x6f62_7803;
const TRY_LOCK_SQL: &str = concat!(
    "SELECT pg_catalog.pg_try_advisory_lock($1, ",
    super::schema_lock_half!(),
    ")"
);

/// This process's gauge session: detached from the pool, holding the lock or asking for it.
#[derive(Debug)]
struct Session {
    conn: PgConnection,
    leads: bool,
}

/// The session that holds the gauge lock (or asks for it at each refresh).
#[derive(Debug, Default)]
pub(super) struct GaugeLeader {
    session: Mutex<Option<Session>>,
}

impl GaugeLeader {
    pub(super) async fn read(
        &self,
        pool: &PgPool,
        now: DateTime<Utc>,
    ) -> Result<GaugeRead, StoreError> {
        let mut slot = self.session.lock().await;
        // The session is out of the slot while a statement runs on it and goes back only
        // once the statement has answered. So if this future is dropped mid-statement (the
        // metrics refresh timed out), the session is dropped with it, its connection
        // closes, and the lock goes with it even if the server had just granted it. The
        // session was detached from the pool before its first statement: a pooled
        // connection never holds the lock.
        let mut session = match slot.take() {
            Some(session) => session,
            None => Session {
                conn: pool.acquire().await?.detach(),
                leads: false,
            },
        };
        if !session.leads {
            let acquired: bool = sqlx::query_scalar(TRY_LOCK_SQL)
                .bind(GAUGE_LOCK_CLASS)
                .fetch_one(&mut session.conn)
                .await?;
            if !acquired {
                // Another replica leads; keep the session to ask again next time.
                *slot = Some(session);
                return Ok(GaugeRead::OtherReplica);
            }
            session.leads = true;
        }
        match read_on(&mut session.conn, now).await {
            Ok(gauges) => {
                *slot = Some(session);
                Ok(GaugeRead::Read(gauges))
            }
            Err(e) => {
                // Ends the session, which frees the lock for another replica.
                let _ = session.conn.close().await;
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
