//! Publishing the pipeline's provider bulkheads to the database, so that processes that
//! cannot see this daemon's memory — `outboxd status`, the admin API of any replica — can
//! show them (table `outbox_provider_states`, one row per owner and provider).
//!
//! Writes are bounded: a daemon writes its rows when it starts, at most every
//! [`CHECK_EVERY`] when a breaker or pause changes, and otherwise every [`PUBLISH_EVERY`];
//! a stopping daemon deletes its rows. A replica killed outright leaves its rows behind:
//! readers show their age and call them stale after [`STALE_AFTER`]; any daemon's next
//! write deletes rows older than [`FORGET_AFTER`]. Failures to publish are logged, never
//! fatal: the bulkheads themselves live in memory and do not depend on this table.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::dispatcher::Dispatcher;
use super::pipeline::ProviderState;
use crate::store::ProviderStateRow;

/// The longest a published row goes without being rewritten while its daemon runs.
pub const PUBLISH_EVERY: Duration = Duration::from_secs(5);
/// How often the publisher looks for a breaker or pause change.
pub const CHECK_EVERY: Duration = Duration::from_millis(250);
/// A row older than this belongs to a replica that stopped or cannot reach the database.
pub const STALE_AFTER: Duration = Duration::from_secs(30);
/// Rows older than this are deleted by any daemon's next write.
pub const FORGET_AFTER: Duration = Duration::from_secs(3600);

/// The rows `owner` publishes for `states` at `now`.
pub fn rows(owner: &str, states: &[ProviderState], now: DateTime<Utc>) -> Vec<ProviderStateRow> {
    states
        .iter()
        .map(|s| ProviderStateRow {
            owner: owner.to_owned(),
            provider: s.provider.clone(),
            in_flight: i64::try_from(s.in_flight).unwrap_or(i64::MAX),
            max_in_flight: i64::try_from(s.max_in_flight).unwrap_or(i64::MAX),
            send_window: Some(i64::try_from(s.send_window).unwrap_or(i64::MAX)),
            rate_limited_waits: i64::try_from(s.rate_limited).unwrap_or(i64::MAX),
            breaker: s.breaker.to_owned(),
            breaker_open_until: s.breaker_open_until,
            paused_until: s.paused_until,
            updated_at: now,
        })
        .collect()
}

/// Whether a published row is older than [`STALE_AFTER`] at `now`.
pub fn is_stale(row: &ProviderStateRow, now: DateTime<Utc>) -> bool {
    (now - row.updated_at).to_std().unwrap_or_default() > STALE_AFTER
}

/// Each provider's breaker state and whether it is paused.
type Marks = Vec<(String, &'static str, bool)>;

/// What makes a publication due before [`PUBLISH_EVERY`]: a breaker or pause change.
fn transitions(states: &[ProviderState]) -> Marks {
    states
        .iter()
        .map(|s| (s.provider.clone(), s.breaker, s.paused))
        .collect()
}

impl Dispatcher {
    /// Publishes this daemon's provider states until `stop` fires or is dropped (spawned by
    /// [`Dispatcher::run`], which awaits its end before withdrawing the rows: a publication
    /// cut off mid-commit could otherwise land after the withdrawal).
    pub(super) async fn publish_provider_states(
        self: Arc<Self>,
        mut stop: tokio::sync::oneshot::Receiver<()>,
    ) {
        let mut last: Option<(Instant, Marks)> = None;
        loop {
            let states = self.provider_states();
            let marks = transitions(&states);
            let due = last
                .as_ref()
                .is_none_or(|(at, seen)| at.elapsed() >= PUBLISH_EVERY || *seen != marks);
            if due {
                let now = Utc::now();
                let forget_before =
                    now - chrono::Duration::from_std(FORGET_AFTER).unwrap_or_default();
                let rows = rows(&self.settings.owner, &states, now);
                match self
                    .store
                    .publish_provider_states(&self.settings.owner, &rows, forget_before)
                    .await
                {
                    Ok(()) => last = Some((Instant::now(), marks)),
                    Err(e) => {
                        tracing::warn!(error = %e, "publishing provider states failed; will retry")
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(CHECK_EVERY) => {}
                _ = &mut stop => return,
            }
        }
    }

    /// Deletes this daemon's published provider states (it is stopping).
    pub(super) async fn withdraw_provider_states(&self) {
        if let Err(e) = self
            .store
            .withdraw_provider_states(&self.settings.owner)
            .await
        {
            tracing::warn!(error = %e, "could not delete this daemon's provider states; they will show as stale");
        }
    }
}
