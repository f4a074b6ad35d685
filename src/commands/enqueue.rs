//! `outboxd enqueue`: records one intent in a transaction of its own, through the same
//! [`crate::enqueue`] producers use, and returns the receipt (`replayed` included).
//!
//! Meant for trials and operators; a producer records intents in *its* transaction, next
//! to its business write.

use serde_json::Value;

use super::open::{open_for_command, OpenError};
use crate::config::Config;
use crate::store::connect::OpenMode;
use crate::store::Database;
use crate::{EnqueueError, Enqueued, NewIntent};

/// Why `outboxd enqueue` recorded nothing.
#[derive(Debug, thiserror::Error)]
pub enum EnqueueCommandError {
    /// `--payload` is not JSON.
    #[error("--payload is not valid JSON: {0}")]
    PayloadNotJson(serde_json::Error),
    /// The database could not be opened or is not migrated.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The producer contract refused the intent (conflict, invalid field, database error).
    #[error(transparent)]
    Enqueue(#[from] EnqueueError),
}

/// The intent as given on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnqueueArgs {
    /// `--tenant`.
    pub tenant: String,
    /// `--operation-id`.
    pub operation_id: String,
    /// `--action`.
    pub action: String,
    /// `--payload`: JSON text (an object).
    pub payload: String,
    /// `--payload-version`.
    pub payload_version: i32,
    /// `--idempotency-key`.
    pub idempotency_key: Option<String>,
    /// `--ordering-key`.
    pub ordering_key: Option<String>,
}

impl EnqueueArgs {
    /// The [`NewIntent`] these arguments describe.
    pub fn to_intent(&self) -> Result<NewIntent, EnqueueCommandError> {
        let payload: Value =
            serde_json::from_str(&self.payload).map_err(EnqueueCommandError::PayloadNotJson)?;
        let mut intent = NewIntent::new(&self.tenant, &self.operation_id, &self.action, payload)
            .with_payload_version(self.payload_version);
        if let Some(key) = &self.idempotency_key {
            intent = intent.with_idempotency_key(key);
        }
        if let Some(key) = &self.ordering_key {
            intent = intent.with_ordering_key(key);
        }
        Ok(intent)
    }
}

/// Records `intent` in its own committed transaction (SQLite: `BEGIN IMMEDIATE`, so
/// concurrent writers queue for the lock).
pub async fn enqueue_committed(db: &Database, intent: NewIntent) -> Result<Enqueued, EnqueueError> {
    db.enqueue_committed(intent).await
}

/// `outboxd enqueue`: validates the arguments, opens the configured database (which must
/// be migrated), records the intent and returns the receipt.
pub async fn run(config: &Config, args: &EnqueueArgs) -> Result<Enqueued, EnqueueCommandError> {
    let intent = args.to_intent()?;
    // Refuse invalid input before touching the database.
    intent.clone().validate().map_err(EnqueueError::from)?;
    let db = open_for_command(config, OpenMode::Existing).await?;
    let result = enqueue_committed(&db, intent).await;
    db.close().await;
    Ok(result?)
}
