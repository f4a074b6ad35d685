//! The daemon loop around [`Dispatcher::run_once`]: several *lanes* step concurrently
//! (`concurrency / batch_size` of them), so one lane's HTTP round trip overlaps another
//! lane's claim and outcome commits. Each lane only decides how long to wait between
//! steps; a forwarder turns every wake-up signal (NOTIFY, or a local enqueue) into a
//! stored permit that wakes one idle lane (a lane that claims a full batch wakes another),
//! so no signal is lost while lanes are busy and an idle system is not stampeded. On shutdown the lanes
//! stop claiming, let in-flight attempts finish within the grace period, and hand back
//! claims whose request was never sent.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio::sync::{watch, Notify};

use super::dispatcher::Dispatcher;
use super::wakeup::Wakeup;

impl Dispatcher {
    /// How many lanes step concurrently: `concurrency / batch_size`, at least one.
    pub fn lanes(&self) -> usize {
        let batch = usize::try_from(self.settings.batch_size.max(1)).unwrap_or(1);
        (self.settings.concurrency / batch).max(1)
    }

    /// The daemon loop: steps until `shutdown` turns true, then drains in-flight attempts
    /// within the grace period.
    pub async fn run_lanes(self: Arc<Self>, wakeup: Wakeup, shutdown: watch::Receiver<bool>) {
        let signal = Arc::new(Notify::new());
        let forwarder = tokio::spawn(forward_wakeups(
            wakeup,
            signal.clone(),
            self.settings.poll_interval,
        ));
        let lanes: Vec<_> = (0..self.lanes())
            .map(|lane| tokio::spawn(self.clone().lane(lane, signal.clone(), shutdown.clone())))
            .collect();
        for lane in lanes {
            let _ = lane.await;
        }
        forwarder.abort();
        self.stopping.store(true, Ordering::SeqCst);
        tracing::info!("dispatcher stopped");
    }

    async fn lane(
        self: Arc<Self>,
        lane: usize,
        signal: Arc<Notify>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut failures = 0u32;
        let long_ago = tokio::time::Instant::now() - Duration::from_secs(3600);
        let (mut last_unconfigured_check, mut last_reclaim) = (long_ago, long_ago);
        while !*shutdown.borrow() {
            if lane == 0 && last_unconfigured_check.elapsed() > Duration::from_secs(60) {
                self.log_unconfigured_once().await;
                last_unconfigured_check = tokio::time::Instant::now();
            }
            // Lane 0 takes over expired leases now and then; the hot path only claims.
            let reclaim = lane == 0 && last_reclaim.elapsed() >= self.settings.reclaim_every;
            if reclaim {
                last_reclaim = tokio::time::Instant::now();
            }
            let step = self.step(reclaim);
            tokio::pin!(step);
            let result = tokio::select! {
                result = &mut step => result,
                _ = shutdown.changed() => {
                    self.stopping.store(true, Ordering::SeqCst);
                    match tokio::time::timeout(self.settings.shutdown_grace, &mut step).await {
                        Ok(result) => result,
                        Err(_) => {
                            tracing::warn!(lane, "shutdown grace expired with attempts in flight; their leases will expire and they will be treated as ambiguous");
                            return;
                        }
                    }
                }
            };
            let wait = match result {
                // Found work: there may be more; step again at once, and recruit an idle
                // lane when the batch was full.
                Ok(report) if report.did_work() => {
                    failures = 0;
                    if report.claimed as u32 >= self.request().limit {
                        signal.notify_one();
                    }
                    continue;
                }
                Ok(_) => {
                    failures = 0;
                    let wait = self.idle_wait().await.min(self.settings.reclaim_every);
                    tracing::debug!(lane, ?wait, "idle: waiting for a wake-up or the next poll");
                    wait
                }
                Err(e) => {
                    failures += 1;
                    let backoff = Duration::from_millis(100 * 2u64.pow(failures.min(6)));
                    tracing::warn!(lane, error = %e, retry_in = ?backoff, "dispatch step failed (database unreachable?); will retry");
                    backoff
                }
            };
            tokio::select! {
                _ = signal.notified() => {}
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.changed() => {}
            }
        }
    }

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

/// Turns each wake-up signal into one stored permit: it wakes one idle lane, or the next
/// lane to go idle (a busy lane steps again anyway when it found work).
async fn forward_wakeups(mut wakeup: Wakeup, signal: Arc<Notify>, poll: Duration) {
    loop {
        if wakeup.wait(poll).await {
            signal.notify_one();
        }
    }
}
