//! How an idle dispatcher waits for work: PostgreSQL `LISTEN outboxd_intents` (registered
//! before the first claim, so no enqueue committed after start is missed), an in-process
//! [`tokio::sync::Notify`] for intents recorded by this process, and a polling fallback
//! that also covers notifications lost while the connection was down.

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
        Self { listener, local }
    }

    /// Whether database notifications are in use.
    pub fn is_listening(&self) -> bool {
        self.listener.is_some()
    }

    /// Waits until a signal arrives (true) or `max` passes (false), whichever is first.
    pub async fn wait(&mut self, max: Duration) -> bool {
        let local = self.local.clone();
        match self.listener.as_mut() {
            Some(listener) => {
                tokio::select! {
                    received = listener.recv() => match received {
                        Ok(_) => true,
                        Err(e) => {
                            // The listener reconnects on the next recv; polling covers the gap,
                            // and the reconnect itself is worth a look for work.
                            tracing::warn!(error = %e, "notification connection lost; polling until it is back");
                            tokio::time::sleep(max.min(Duration::from_millis(500))).await;
                            true
                        }
                    },
                    _ = local.notified() => true,
                    _ = tokio::time::sleep(max) => false,
                }
            }
            None => {
                tokio::select! {
                    _ = local.notified() => true,
                    _ = tokio::time::sleep(max) => false,
                }
            }
        }
    }
}
