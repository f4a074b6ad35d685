//! How an idle dispatcher waits for work: PostgreSQL `LISTEN outboxd_intents` (registered
//! before the first claim, so no enqueue committed after start is missed), an in-process
//! [`tokio::sync::Notify`] for intents recorded by this process, and a polling fallback
//! that also covers notifications lost while the connection was down.
//!
//! The channel is one per database; each notification names the schema of the outbox it
//! comes from (migration 0007), and a notification naming another schema — another outbox
//! in the same database — does not wake this dispatcher; nor does a redispatch in another
//! outbox (this release notifies with its schema). One with no payload (a trigger older
//! than 0007, a redispatch by an earlier release's binary, or a `NOTIFY` sent by hand)
//! wakes it.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgListener;
use tokio::sync::Notify;

use crate::store::Database;

/// The NOTIFY channel the intents table's trigger signals on commit.
pub const CHANNEL: &str = "outboxd_intents";

/// A source of "there may be work" signals.
pub struct Wakeup {
    listener: Option<PgListener>,
    local: Arc<Notify>,
    /// The schema of this dispatcher's outbox; `None` (not known) wakes on every
    /// notification.
    schema: Option<String>,
}

impl Wakeup {
    /// Registers the listener (PostgreSQL) before returning. On SQLite, or when the
    /// listener cannot be set up, only the local signal and polling remain.
    pub async fn new(db: &Database, local: Arc<Notify>) -> Self {
        let listener = match db.listen(CHANNEL).await {
            Ok(listener) => listener,
            Err(e) => {
                tracing::warn!(error = %e, "cannot LISTEN for new intents; falling back to polling");
                None
            }
        };
        let schema = match listener {
            Some(_) => db.outbox_schema().await.unwrap_or_else(|e| {
                tracing::warn!(error = %e, "cannot tell which schema this outbox is in; waking on every outbox's notifications");
                None
            }),
            None => None,
        };
        Self {
            listener,
            local,
            schema,
        }
    }

    /// Whether a notification with `payload` may announce work for this dispatcher.
    fn concerns_us(&self, payload: &str) -> bool {
        payload.is_empty() || self.schema.as_deref().is_none_or(|own| own == payload)
    }

    /// Whether database notifications are in use.
    pub fn is_listening(&self) -> bool {
        self.listener.is_some()
    }

    /// Waits until a signal arrives (true) or `max` passes (false), whichever is first.
    /// A notification from another outbox of the same database is not a signal.
    pub async fn wait(&mut self, max: Duration) -> bool {
        let local = self.local.clone();
        let until = tokio::time::Instant::now() + max;
        while let Some(listener) = self.listener.as_mut() {
            let received = tokio::select! {
                received = listener.recv() => received,
                _ = local.notified() => return true,
                _ = tokio::time::sleep_until(until) => return false,
            };
            match received {
                Ok(note) if self.concerns_us(note.payload()) => return true,
                // Another outbox of this database: keep waiting, within `max`.
                Ok(_) => continue,
                Err(e) => {
                    // The listener reconnects on the next recv; polling covers the gap,
                    // and the reconnect itself is worth a look for work.
                    tracing::warn!(error = %e, "notification connection lost; polling until it is back");
                    tokio::time::sleep(max.min(Duration::from_millis(500))).await;
                    return true;
                }
            }
        }
        tokio::select! {
            _ = local.notified() => true,
            _ = tokio::time::sleep_until(until) => false,
        }
    }
}
