//! Enqueue on SQLite: one insert guarded by `ON CONFLICT DO NOTHING` and the tombstone
//! check; otherwise a replay or a conflict is answered from the stored row, or from the
//! tombstone if the operation was pruned. The digest and the key the provider sees
//! ([`crate::wire_key`]) are computed in Rust: SQLite has neither sha256 nor HMAC.
//!
//! Producers should open their transaction with `BEGIN IMMEDIATE`
//! (`pool.begin_with("BEGIN IMMEDIATE")`) so concurrent writers wait for the lock instead of
//! failing with `SQLITE_BUSY` when a read transaction is upgraded.

use async_trait::async_trait;
use chrono::Utc;
use sqlx::{Row, Sqlite, SqliteConnection, Transaction};

use super::{EnqueueError, Enqueued, OutboxTransaction, ValidIntent};
use crate::intent::{IntentId, IntentState};
use crate::wire_key::{load_key_secret, wire_idempotency_key};

/// Inserts the intent unless its operation is already recorded or was pruned (tombstone),
/// in one statement: the statement takes SQLite's write lock before it reads, so no pruning
/// can commit between the tombstone check and the insert.
const INSERT_SQL: &str = "INSERT INTO outbox_intents (tenant, operation_id, action, \
     payload_version, payload, payload_sha256, idempotency_key, ordering_key, \
     next_attempt_at, deadline_at, created_at, updated_at, requested_idempotency_key) \
     SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11, ?12 \
     WHERE NOT EXISTS (SELECT 1 FROM outbox_tombstones WHERE tenant = ?1 AND operation_id = ?2) \
     ON CONFLICT (tenant, operation_id) DO NOTHING RETURNING id";

const EXISTING_SQL: &str = "SELECT id, payload_sha256, idempotency_key, state \
     FROM outbox_intents WHERE tenant = ?1 AND operation_id = ?2";

const TOMBSTONE_SQL: &str = "SELECT intent_id, payload_sha256, idempotency_key, final_state \
     FROM outbox_tombstones WHERE tenant = ?1 AND operation_id = ?2";

fn conflict(i: &ValidIntent) -> EnqueueError {
    EnqueueError::Conflict {
        tenant: i.tenant.to_string(),
        operation_id: i.operation_id.to_string(),
    }
}

/// Answers from a stored `(id, digest, key, state)` row: replay when digests match.
fn answer(i: &ValidIntent, row: &sqlx::sqlite::SqliteRow) -> Result<Enqueued, EnqueueError> {
    let digest: String = row.try_get(1)?;
    if digest != i.digest.as_str() {
        return Err(conflict(i));
    }
    let state: String = row.try_get(3)?;
    Ok(Enqueued {
        intent_id: row.try_get(0)?,
        idempotency_key: row.try_get(2)?,
        replayed: true,
        state: IntentState::parse(&state).unwrap_or(IntentState::Pending),
    })
}

/// Records the intent. On failure nothing is left behind by this call; the caller's
/// transaction decides the rest.
async fn enqueue_sqlite(
    conn: &mut SqliteConnection,
    i: &ValidIntent,
) -> Result<Enqueued, EnqueueError> {
    let now = Utc::now().timestamp_millis();
    let payload = serde_json::to_string(&i.payload).map_err(|e| {
        crate::intent::InvalidField::new("payload", format!("cannot be serialized: {e}"))
    })?;
    let secret = load_key_secret(&mut *conn).await?;
    let wire_key = wire_idempotency_key(&secret, &i.tenant, &i.idempotency_key);
    let inserted: Option<IntentId> = sqlx::query_scalar(INSERT_SQL)
        .bind(i.tenant.as_str())
        .bind(i.operation_id.as_str())
        .bind(i.action.as_str())
        .bind(i.payload_version)
        .bind(payload)
        .bind(i.digest.as_str())
        .bind(wire_key.as_str())
        .bind(i.ordering_key.as_ref().map(|k| k.as_str()))
        .bind(i.not_before.map(|t| t.timestamp_millis()).unwrap_or(now))
        .bind(i.deadline.map(|t| t.timestamp_millis()))
        .bind(now)
        .bind(i.requested_idempotency_key.as_ref().map(|k| k.as_str()))
        .fetch_optional(&mut *conn)
        .await?;

    if let Some(id) = inserted {
        return Ok(Enqueued {
            intent_id: id,
            idempotency_key: wire_key.to_string(),
            replayed: false,
            state: IntentState::Pending,
        });
    }
    // Already recorded, or pruned: answer from the intent, else from its tombstone.
    let existing = sqlx::query(EXISTING_SQL)
        .bind(i.tenant.as_str())
        .bind(i.operation_id.as_str())
        .fetch_optional(&mut *conn)
        .await?;
    let row = match existing {
        Some(row) => row,
        None => {
            sqlx::query(TOMBSTONE_SQL)
                .bind(i.tenant.as_str())
                .bind(i.operation_id.as_str())
                .fetch_one(&mut *conn)
                .await?
        }
    };
    answer(i, &row)
}

#[async_trait]
impl OutboxTransaction for SqliteConnection {
    async fn enqueue_valid(&mut self, intent: &ValidIntent) -> Result<Enqueued, EnqueueError> {
        enqueue_sqlite(self, intent).await
    }
}

#[async_trait]
impl OutboxTransaction for Transaction<'_, Sqlite> {
    async fn enqueue_valid(&mut self, intent: &ValidIntent) -> Result<Enqueued, EnqueueError> {
        enqueue_sqlite(self, intent).await
    }
}
