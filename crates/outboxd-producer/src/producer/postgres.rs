//! Enqueue on PostgreSQL: one call of the `outbox_enqueue` SQL function, the same call other
//! languages make. The digest and the key the provider sees are computed there, in SQL only
//! (one place on PostgreSQL); the Rust validation before it only gives clearer errors.

use async_trait::async_trait;
use sqlx::{PgConnection, Postgres, Row, Transaction};

use super::{EnqueueError, Enqueued, OutboxTransaction, ValidIntent};
use crate::intent::IntentState;

/// SQLSTATE raised by the SQL functions for a digest conflict.
pub const CONFLICT_SQLSTATE: &str = "OB409";

const ENQUEUE_SQL: &str = "SELECT intent_id, idempotency_key, replayed, state \
     FROM outbox_enqueue($1, $2, $3, $4, $5, $6, $7, $8, $9)";

/// Records the intent; a conflict raised by the function maps to [`EnqueueError::Conflict`].
async fn enqueue_pg(conn: &mut PgConnection, i: &ValidIntent) -> Result<Enqueued, EnqueueError> {
    let row = sqlx::query(ENQUEUE_SQL)
        .bind(i.tenant.as_str())
        .bind(i.operation_id.as_str())
        .bind(i.action.as_str())
        .bind(sqlx::types::Json(&i.payload))
        .bind(i.payload_version)
        .bind(i.requested_idempotency_key.as_ref().map(|k| k.as_str()))
        .bind(i.ordering_key.as_ref().map(|k| k.as_str()))
        .bind(i.not_before)
        .bind(i.deadline)
        .fetch_one(conn)
        .await
        .map_err(|e| match &e {
            sqlx::Error::Database(db) if db.code().as_deref() == Some(CONFLICT_SQLSTATE) => {
                EnqueueError::Conflict {
                    tenant: i.tenant.to_string(),
                    operation_id: i.operation_id.to_string(),
                }
            }
            _ => EnqueueError::Database(e),
        })?;
    let state: String = row.try_get("state")?;
    let idempotency_key: String = row.try_get("idempotency_key")?;
    let replayed: bool = row.try_get("replayed")?;
    // A schema older than 0003 has the same function and would record the key unnamespaced
    // (and the digest rounded): refuse, like SQLite without its secret. Replays of intents
    // recorded before the upgrade keep their old keys and are fine.
    if !replayed && !idempotency_key.starts_with(crate::wire_key::WIRE_KEY_PREFIX) {
        return Err(crate::wire_key::KeySecretError::SchemaTooOld {
            key: idempotency_key,
        }
        .into());
    }
    Ok(Enqueued {
        intent_id: row.try_get("intent_id")?,
        idempotency_key,
        replayed,
        state: IntentState::parse(&state).unwrap_or(IntentState::Pending),
    })
}

#[async_trait]
impl OutboxTransaction for PgConnection {
    async fn enqueue_valid(&mut self, intent: &ValidIntent) -> Result<Enqueued, EnqueueError> {
        enqueue_pg(self, intent).await
    }
}

#[async_trait]
impl OutboxTransaction for Transaction<'_, Postgres> {
    async fn enqueue_valid(&mut self, intent: &ValidIntent) -> Result<Enqueued, EnqueueError> {
        enqueue_pg(self, intent).await
    }
}
