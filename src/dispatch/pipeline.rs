//! The daemon's delivery engine: a pipeline, not batches.
//!
//! * **Slots are refilled as requests finish.** Up to `concurrency` requests are in flight;
//!   whenever one ends, the claimer claims again for the free slots. Nothing waits for the
//!   slowest request of a batch.
//! * **Each provider has a bulkhead** ([`super::capacity`]): the claimer asks, per provider,
//!   only for as many intents as that provider may take now (its `max_in_flight`, minus a
//!   `Retry-After` pause or an open circuit breaker), so a slow, paused or failing provider
//!   never holds a slot another provider could use, and no intent spends an attempt on a
//!   provider known to be down.
//! * **Outcomes are group-committed**: each finished request goes to one writer, which
//!   commits at once whatever has finished (up to `batch_size` outcomes); what finishes
//!   while a group commits forms the next group. No timer: a lone answer is committed as
//!   soon as it arrives, and a busy pipeline's groups grow with the commit time.
//!
//! Every rule of the step holds: the claim commits before any request is sent, outcomes are
//! fenced by the claim's token, expired leases are taken over as ambiguous attempts, and on
//! shutdown claiming stops, in-flight requests get the grace period, and claims never sent
//! are handed back. [`Dispatcher::run_once`] (one step) stays the testable unit; this loop
//! only schedules it around slots.

pub use crate::provider::state::ProviderState;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch, Notify, Semaphore};
use tokio::task::JoinSet;

use super::capacity::{ProviderGate, ProviderSignal};
use super::dispatcher::{Dispatcher, Finished, StepReport};
use super::fairness::TenantTurns;
use super::lanes::{Lanes, ProviderLane};
use super::wakeup::Wakeup;
use crate::intent::IntentId;
use crate::store::ClaimRequest;

/// How long the claimer waits, after a request ended, for more slots to free up.
pub const REFILL_WINDOW: Duration = Duration::from_millis(1);

impl Dispatcher {
    fn provider_lanes(&self) -> Lanes {
        let mut lanes: BTreeMap<String, ProviderLane> = BTreeMap::new();
        for name in self.actions.names() {
            let Some(action) = self.actions.get(&name) else {
                continue;
            };
            lanes
                .entry(action.client.name().to_owned())
                .or_insert_with(|| ProviderLane {
                    actions: Vec::new(),
                    gate: ProviderGate::new(action.client.limits()),
                    turns: TenantTurns::new(),
                })
                .actions
                .push(name);
        }
        Arc::new(Mutex::new(lanes))
    }

    /// The daemon loop (see the module doc): runs until `shutdown` turns true, then lets
    /// in-flight requests finish within the grace period.
    pub async fn run(self: Arc<Self>, wakeup: Wakeup, shutdown: watch::Receiver<bool>) {
        // Stop at once on the signal, even while a claim is waiting for the database: a
        // request claimed after it is handed back unsent, not started.
        let watcher = {
            let (this, mut signal) = (self.clone(), shutdown.clone());
            tokio::spawn(async move {
                while !*signal.borrow_and_update() {
                    if signal.changed().await.is_err() {
                        break;
                    }
                }
                this.stopping.store(true, Ordering::SeqCst);
            })
        };
        let lanes = self.provider_lanes();
        *self
            .provider_states
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(lanes.clone());
        let (outcomes, writer_rx) = mpsc::unbounded_channel();
        let writer = tokio::spawn(self.clone().write_outcomes(writer_rx));
        let (stop_publishing, publishing_stopped) = tokio::sync::oneshot::channel();
        let publisher = tokio::spawn(self.clone().publish_provider_states(publishing_stopped));
        let slots = Arc::new(Semaphore::new(self.settings.concurrency.max(1)));
        let finished = Arc::new(Notify::new());
        let mut requests = JoinSet::new();
        self.claim_loop(
            wakeup,
            shutdown,
            &lanes,
            &slots,
            &finished,
            &outcomes,
            &mut requests,
        )
        .await;
        self.stopping.store(true, Ordering::SeqCst);
        watcher.abort();
        let drained = tokio::time::timeout(self.settings.shutdown_grace, async {
            while requests.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(in_flight = requests.len(), "shutdown grace expired with attempts in flight; their leases will expire and they will be treated as ambiguous");
            requests.abort_all();
        }
        drop(outcomes);
        let _ = writer.await;
        let _ = stop_publishing.send(());
        let publisher_abort = publisher.abort_handle();
        if tokio::time::timeout(Duration::from_secs(2), publisher)
            .await
            .is_err()
        {
            publisher_abort.abort(); // a publication stuck on an unreachable database
        }
        self.withdraw_provider_states().await;
        tracing::info!("dispatcher stopped");
    }

    #[allow(clippy::too_many_arguments)]
    async fn claim_loop(
        self: &Arc<Self>,
        mut wakeup: Wakeup,
        mut shutdown: watch::Receiver<bool>,
        lanes: &Lanes,
        slots: &Arc<Semaphore>,
        finished: &Arc<Notify>,
        outcomes: &mpsc::UnboundedSender<Finished>,
        requests: &mut JoinSet<()>,
    ) {
        let mut failures = 0u32;
        let long_ago = Instant::now() - Duration::from_secs(3600);
        let (mut last_reclaim, mut last_unconfigured_check) = (long_ago, long_ago);
        while !*shutdown.borrow() && !self.stopping.load(Ordering::SeqCst) {
            while requests.try_join_next().is_some() {}
            if last_unconfigured_check.elapsed() > Duration::from_secs(60) {
                self.log_unconfigured_once().await;
                last_unconfigured_check = Instant::now();
            }
            if last_reclaim.elapsed() >= self.settings.reclaim_every {
                last_reclaim = Instant::now();
                if let Err(e) = self.take_over_expired(outcomes).await {
                    tracing::warn!(error = %e, "taking over expired leases failed; will retry");
                }
            }
            let round = self
                .claim_round(lanes, slots, finished, outcomes, requests)
                .await;
            if let Some(m) = &self.metrics {
                m.providers().set(&self.provider_states());
            }
            let wait = match round {
                Ok(ClaimRound::Full) => {
                    failures = 0;
                    continue;
                }
                Ok(ClaimRound::NoSlots) => None,
                Ok(ClaimRound::Idle { reopens_at }) => {
                    failures = 0;
                    let idle = if slots.available_permits() == self.settings.concurrency.max(1) {
                        let idle = self.idle_wait().await.min(self.settings.reclaim_every);
                        // Nothing in flight and nothing claimable: only a wake-up, a due
                        // time or a reopening provider starts work now (tests read this).
                        tracing::debug!(?idle, "idle: waiting for a wake-up or the next poll");
                        idle
                    } else {
                        // Requests in flight: their ends wake the claimer; no query needed.
                        self.settings.poll_interval.min(self.settings.reclaim_every)
                    };
                    Some(reopens_at.map_or(idle, |at| {
                        idle.min(at.saturating_duration_since(Instant::now()))
                    }))
                }
                Err(e) => {
                    failures += 1;
                    let backoff = Duration::from_millis(100 * 2u64.pow(failures.min(6)));
                    tracing::warn!(error = %e, retry_in = ?backoff, "claiming failed (database unreachable?); will retry");
                    Some(backoff)
                }
            };
            // Free slots: wait for a wake-up, a due time or a finished request. No slot:
            // wait for a finished request only.
            let sleep = wait.unwrap_or(Duration::from_secs(3600));
            let by_a_finished_request = tokio::select! {
                woken = wakeup.wait(sleep), if wait.is_some() => { let _ = woken; false }
                _ = finished.notified() => true,
                _ = shutdown.changed() => false,
            };
            if by_a_finished_request {
                self.gather_free_slots(slots, finished).await;
            }
        }
    }

    /// After a request ended, waits up to [`REFILL_WINDOW`] for more to end, so that a busy
    /// pipeline claims several intents per statement instead of one per finished request.
    async fn gather_free_slots(&self, slots: &Semaphore, finished: &Notify) {
        let concurrency = self.settings.concurrency.max(1);
        let batch = usize::try_from(self.settings.batch_size.max(1)).unwrap_or(1);
        let enough = (concurrency / 4).clamp(1, batch);
        let _ = tokio::time::timeout(REFILL_WINDOW, async {
            while slots.available_permits() < enough {
                finished.notified().await;
            }
        })
        .await;
    }

    async fn take_over_expired(
        &self,
        outcomes: &mpsc::UnboundedSender<Finished>,
    ) -> Result<(), crate::store::StoreError> {
        let expired = self.store.reclaim_expired(&self.request()).await?;
        if let Some(m) = &self.metrics {
            m.observe_lease_expiries(expired.len());
        }
        for intent in &expired {
            let _ = outcomes.send(self.after_expiry(intent));
        }
        Ok(())
    }

    /// Claims, per provider, as many intents as the provider and the free slots allow, and
    /// starts each request on its own.
    async fn claim_round(
        self: &Arc<Self>,
        lanes: &Lanes,
        slots: &Arc<Semaphore>,
        finished: &Arc<Notify>,
        outcomes: &mpsc::UnboundedSender<Finished>,
        requests: &mut JoinSet<()>,
    ) -> Result<ClaimRound, crate::store::StoreError> {
        let batch = usize::try_from(self.settings.batch_size.max(1)).unwrap_or(1);
        let (mut full, mut reopens_at) = (false, None::<Instant>);
        let providers: Vec<String> = lock(lanes).keys().cloned().collect();
        for provider in providers {
            let claimed_at;
            let free = slots.available_permits();
            if free == 0 {
                return Ok(ClaimRound::NoSlots);
            }
            let (limit, actions, share) = {
                let mut lanes = lock(lanes);
                let lane = lanes.get_mut(&provider).expect("lanes are fixed at start");
                let now = Instant::now();
                let available = lane.gate.take(free.min(batch), now);
                claimed_at = lane.gate.shut_count();
                if available == 0 {
                    reopens_at = match (reopens_at, lane.gate.reopens_at(now)) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    continue;
                }
                let limit = u32::try_from(available).unwrap_or(u32::MAX);
                (available, lane.actions.clone(), lane.turns.share(limit))
            };
            let request = ClaimRequest {
                limit: u32::try_from(limit).unwrap_or(u32::MAX),
                actions,
                ..self.request()
            };
            let claim_started = Instant::now();
            let claimed = self.claim(&request, &share).await?;
            if let Some(m) = &self.metrics {
                m.observe_claim(claimed.len());
            }
            full |= claimed.len() == limit;
            let rate = {
                let mut lanes = lock(lanes);
                let lane = lanes.get_mut(&provider).expect("lanes are fixed at start");
                lane.turns.advance(&share, request.limit, &claimed);
                lane.gate.start(claimed.len(), Instant::now());
                lane.gate.rate_tokens()
            };
            for intent in claimed {
                let lease_expiry = super::lease::local_expiry(claim_started, &intent);
                let permit = slots.clone().try_acquire_owned().expect("one claimer");
                let (this, lanes, finished, outcomes) = (
                    self.clone(),
                    lanes.clone(),
                    finished.clone(),
                    outcomes.clone(),
                );
                let (provider, rate) = (provider.clone(), rate.clone());
                requests.spawn(async move {
                    // With a rate limit the token is taken here, just before the send (see
                    // `capacity::RATE_CLAIM_AHEAD`), and its room to claim ahead wakes the
                    // claimer. Either way a provider shut since the claim began is not sent.
                    let waited = match &rate {
                        Some(tokens) => tokens.take(&this.stopping).await,
                        None => Some(false),
                    };
                    // Stopping while it waited: `before_send` still takes it out of the
                    // count of waiters; `deliver_or_release` hands it back unsent.
                    let may_send = lock(&lanes).get_mut(&provider).is_none_or(|lane| {
                        lane.gate.before_send(claimed_at, waited.unwrap_or(true))
                    });
                    if rate.is_some() {
                        finished.notify_one();
                    }
                    let done = if may_send {
                        let done = this.deliver_or_release(intent, lease_expiry).await;
                        let signal = match &done {
                            Finished::Outcome(outcome) => ProviderSignal::of(outcome),
                            Finished::Release(_) => ProviderSignal::Silent,
                        };
                        if let Some(lane) = lock(&lanes).get_mut(&provider) {
                            lane.gate.finish(signal, Instant::now());
                        }
                        done
                    } else {
                        // Out of flight already (`before_send`); it says nothing of the
                        // provider, so no `finish`.
                        let reason = "released unsent (the provider's breaker opened, or a Retry-After pause began, after it was claimed)";
                        Finished::handed_back(&intent, reason)
                    };
                    let _ = outcomes.send(done);
                    drop(permit);
                    finished.notify_one();
                });
            }
        }
        Ok(if full {
            ClaimRound::Full
        } else {
            ClaimRound::Idle { reopens_at }
        })
    }

    /// The one outcome writer: commits what has finished, in groups.
    async fn write_outcomes(self: Arc<Self>, mut rx: mpsc::UnboundedReceiver<Finished>) {
        let max = usize::try_from(self.settings.batch_size.max(1)).unwrap_or(1);
        while let Some(first) = rx.recv().await {
            // Whatever else has finished by now joins it; what finishes while it commits
            // forms the next group.
            let mut group = vec![first];
            while group.len() < max {
                match rx.try_recv() {
                    Ok(next) => group.push(next),
                    Err(_) => break,
                }
            }
            for batch in unique_batches(group) {
                let mut report = StepReport::default();
                if let Err(e) = self.record(batch, &mut report).await {
                    tracing::error!(error = %e, "recording outcomes failed past the lease; those intents will be taken over as ambiguous");
                }
            }
        }
    }

    /// Each provider's bulkhead now (empty before [`Dispatcher::run`] starts).
    pub fn provider_states(&self) -> Vec<ProviderState> {
        let lanes = self
            .provider_states
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let Some(lanes) = lanes else {
            return Vec::new();
        };
        let (now, wall) = (Instant::now(), chrono::Utc::now());
        let on_wall_clock = |at: Instant| {
            wall + chrono::Duration::from_std(at.saturating_duration_since(now)).unwrap_or_default()
        };
        let mut guard = lock(&lanes);
        let states = guard
            .iter_mut()
            .map(|(name, lane)| {
                let breaker = lane.gate.breaker(now);
                let paused_until = lane.gate.paused_until(now);
                ProviderState {
                    provider: name.clone(),
                    in_flight: lane.gate.in_flight(),
                    breaker: breaker.as_str(),
                    paused: paused_until.is_some(),
                    rate_limited: lane.gate.rate_limited(),
                    max_in_flight: lane.gate.limits().max_in_flight,
                    send_window: lane.gate.window(),
                    breaker_open_until: match breaker {
                        super::capacity::Breaker::Open { until } => Some(on_wall_clock(until)),
                        _ => None,
                    },
                    paused_until: paused_until.map(on_wall_clock),
                }
            })
            .collect();
        drop(guard);
        states
    }
}

/// What one claim round found.
enum ClaimRound {
    /// Some provider's claim came back full: claim again at once.
    Full,
    /// Every slot is taken.
    NoSlots,
    /// Nothing more to claim now; a shut provider reopens at this instant, if any.
    Idle { reopens_at: Option<Instant> },
}

/// Splits finished work so that no batch holds one intent twice (its own late outcome and
/// the takeover of its expired lease can end up in one group; the fence decides, one at a
/// time).
fn unique_batches(group: Vec<Finished>) -> Vec<Vec<Finished>> {
    let mut batches: Vec<(std::collections::HashSet<IntentId>, Vec<Finished>)> = Vec::new();
    for item in group {
        let id = match &item {
            Finished::Outcome(o) => o.intent_id,
            Finished::Release(r) => r.intent_id,
        };
        match batches.iter_mut().find(|(ids, _)| !ids.contains(&id)) {
            Some((ids, items)) => {
                ids.insert(id);
                items.push(item);
            }
            None => batches.push(([id].into_iter().collect(), vec![item])),
        }
    }
    batches.into_iter().map(|(_, items)| items).collect()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
