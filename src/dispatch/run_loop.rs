//! What the delivery loop ([`super::pipeline`]) asks between claims: how long an idle
//! dispatcher may wait, and a once-per-action warning about intents whose action is not
//! configured.

use std::time::Duration;

use chrono::Utc;

use super::dispatcher::Dispatcher;

impl Dispatcher {
    pub(super) async fn log_unconfigured_once(&self) {
        let configured = self.actions.names();
        let Ok(waiting) = self.store.pending_unconfigured_actions(&configured).await else {
            return;
        };
        let mut logged = self.unconfigured_logged.lock().await;
        for (action, count) in waiting {
            if logged.insert(action.clone()) {
                tracing::warn!(%action, pending = count,
                    "intents wait for an action that is not configured; they stay pending until it is");
            }
        }
    }

    pub(super) async fn idle_wait(&self) -> Duration {
        let poll = self.settings.poll_interval;
        match self.store.next_due_at(&self.actions.names()).await {
            // Due in the future: wake up for it. Due already but not claimed (an ordering
            // chain waits on an earlier intent): nothing to do until something changes.
            Ok(Some(at)) if at > Utc::now() => (at - Utc::now())
                .to_std()
                .unwrap_or(poll)
                .clamp(Duration::from_millis(5), poll),
            _ => poll,
        }
    }
}
