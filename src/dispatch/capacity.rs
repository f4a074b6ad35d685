//! Per-provider bulkheads: how many more requests a provider may be sent right now.
//!
//! Each provider has a [`ProviderGate`]: at most its send window of requests at once (an
//! adaptive window, [`super::window`]: one request at first and after an outage, one more
//! per answer up to `max_in_flight`, half as many after a failure); at most
//! `rate_limit` requests per second with a burst (GCRA, the `governor` crate; the token
//! is taken by the request itself just before it is sent, see [`RateTokens`]); a
//! provider-wide pause after a 429 or 503 that carried `Retry-After` (the provider said
//! "not now", so no other intent spends an attempt on it either); and a circuit breaker
//! that opens after `breaker_failures` consecutive failures (not sent, timeouts, resets,
//! 5xx), stays open for `breaker_cooldown`, then lets one trial request through (half
//! open): its success closes the breaker, its failure opens it again. The pipeline claims
//! only as many intents of a provider as [`ProviderGate::available`] allows, so a paused,
//! broken or saturated provider never holds a slot another provider could use, and no
//! intent spends an attempt on a provider known to be down.
//!
//! Pure state machines with the time passed in; no I/O, no clock of their own.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

use super::window::SendWindow;
use crate::action::AttemptClass;
pub use crate::config::default_max_in_flight;
pub use crate::provider::limits::{ProviderLimits, RateLimit};
use crate::store::{OutcomeRecord, Transition};

/// What one finished request says about its provider's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderSignal {
    /// The provider answered (2xx, or a definite 4xx refusal): it is up.
    Answered,
    /// It could not be reached, timed out, reset, or failed with a 5xx.
    Failed,
    /// It asked everyone to wait (429/503 with `Retry-After`) this long.
    PauseFor(Duration),
    /// Nothing was sent (a claim handed back, a deadline passed): says nothing.
    Silent,
}

impl ProviderSignal {
    /// Reads the signal from a recorded outcome (`now` is when it was decided).
    pub fn of(outcome: &OutcomeRecord) -> ProviderSignal {
        let Some(attempt) = &outcome.attempt else {
            return ProviderSignal::Silent;
        };
        if attempt.duration.is_zero() && attempt.http_status.is_none() {
            // Decided without a request (unsafe to resend, deadline passed).
            if attempt.class == AttemptClass::NotSent {
                return ProviderSignal::Silent;
            }
        }
        match (attempt.class, attempt.http_status) {
            (AttemptClass::Retryable, Some(429 | 503)) => match &outcome.transition {
                Transition::RetryAt { at } => {
                    ProviderSignal::PauseFor((*at - outcome.now).to_std().unwrap_or(Duration::ZERO))
                }
                _ => ProviderSignal::Failed,
            },
            (AttemptClass::Delivered | AttemptClass::Rejected | AttemptClass::Retryable, _) => {
                ProviderSignal::Answered
            }
            (AttemptClass::NotSent | AttemptClass::Ambiguous, _) => ProviderSignal::Failed,
        }
    }
}

/// The breaker's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Breaker {
    /// Requests flow; this many failures in a row so far.
    Closed {
        /// Consecutive failures.
        failures: u32,
    },
    /// Nothing is sent until `until`.
    Open {
        /// When one trial request may go.
        until: Instant,
    },
    /// One trial request may go (or is in flight).
    HalfOpen {
        /// Whether the trial request is in flight.
        trial_in_flight: bool,
    },
}

impl Breaker {
    /// `closed`, `open` or `half_open`, for metrics and status.
    pub fn as_str(&self) -> &'static str {
        match self {
            Breaker::Closed { .. } => "closed",
            Breaker::Open { .. } => "open",
            Breaker::HalfOpen { .. } => "half_open",
        }
    }
}

/// How far ahead of its rate limiter a provider's intents are claimed: as many as tokens
/// come due within this time, at least two. A claimed intent waits for its token in its
/// own task and goes out the moment the token is due, so the claim statement's latency
/// never delays a token; GCRA with a small burst forgets every moment a token is left
/// unused, so a token taken late (at claim time, by a claimer that woke late) lowered the
/// sustained rate (41 of 50/s on SQLite). A claimed intent waits at most this long plus one
/// token interval, or two token intervals if that is longer (at most 2 s: `per_second` is
/// at least 1), far inside its lease and the shutdown grace period.
pub const RATE_CLAIM_AHEAD: Duration = Duration::from_millis(50);

/// How often a request waiting for its rate token looks whether the daemon is stopping.
pub const STOP_CHECK: Duration = Duration::from_millis(50);

/// How often a provider had been shut (breaker opened, `Retry-After` pause) when a request
/// was claimed ([`ProviderGate::shut_count`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShutCount(u64);

/// A provider's rate limiter, shared with the requests that wait on it.
#[derive(Debug, Clone)]
pub struct RateTokens(Arc<DefaultDirectRateLimiter>);

impl RateTokens {
    fn new(limit: RateLimit) -> Self {
        let quota = Quota::per_second(limit.per_second).allow_burst(limit.burst);
        Self(Arc::new(RateLimiter::direct(quota)))
    }

    /// Waits until a token is due and takes it: `Some(true)` when it had to wait. `None`
    /// when `stopping` turned true first (looked at every [`STOP_CHECK`] at least), so a
    /// shutdown hands a waiting request back at once instead of waiting for its token or
    /// being cut off by the grace period; no token is spent then.
    pub async fn take(&self, stopping: &AtomicBool) -> Option<bool> {
        let mut waited = false;
        loop {
            if stopping.load(Ordering::SeqCst) {
                return None;
            }
            match self.0.check() {
                Ok(()) => return Some(waited),
                Err(not_until) => {
                    waited = true;
                    let wait = not_until.wait_time_from(DefaultClock::default().now());
                    tokio::time::sleep(wait.min(STOP_CHECK)).await;
                }
            }
        }
    }
}

/// One provider's live bulkhead state.
#[derive(Debug)]
pub struct ProviderGate {
    limits: ProviderLimits,
    in_flight: usize,
    window: SendWindow,
    paused_until: Option<Instant>,
    breaker: Breaker,
    rate: Option<RateTokens>,
    /// Claimed requests that have not taken their rate token yet.
    awaiting_token: usize,
    /// Counts the breaker's openings and the `Retry-After` pauses: a request claimed
    /// before it changed is not sent ([`ProviderGate::before_send`]).
    shut_count: u64,
    /// How many may wait for a token at once ([`RATE_CLAIM_AHEAD`]).
    claim_ahead: usize,
    /// How many requests had to wait for a rate token (for status and metrics).
    rate_limited: u64,
}

impl ProviderGate {
    /// A closed, idle gate.
    pub fn new(limits: ProviderLimits) -> Self {
        let claim_ahead = limits.rate_limit.map_or(0, |r| {
            let due = f64::from(r.per_second.get()) * RATE_CLAIM_AHEAD.as_secs_f64();
            (due.ceil() as usize).max(2)
        });
        Self {
            limits,
            in_flight: 0,
            window: SendWindow::new(limits.max_in_flight),
            paused_until: None,
            breaker: Breaker::Closed { failures: 0 },
            rate: limits.rate_limit.map(RateTokens::new),
            awaiting_token: 0,
            shut_count: 0,
            claim_ahead,
            rate_limited: 0,
        }
    }

    /// The settings this gate enforces.
    pub fn limits(&self) -> &ProviderLimits {
        &self.limits
    }

    /// How many requests had to wait for the rate limiter.
    pub fn rate_limited(&self) -> u64 {
        self.rate_limited
    }

    /// How many of `want` intents may be claimed now: [`ProviderGate::available`], and
    /// with a rate limit at most [`RATE_CLAIM_AHEAD`]'s worth of tokens, counting the
    /// requests still waiting for theirs.
    pub fn take(&mut self, want: usize, now: Instant) -> usize {
        let room = self.available(now).min(want);
        match self.rate {
            Some(_) => room.min(self.claim_ahead.saturating_sub(self.awaiting_token)),
            None => room,
        }
    }

    /// The rate limiter a claimed request takes its token from before it is sent, if the
    /// provider has one.
    pub fn rate_tokens(&self) -> Option<RateTokens> {
        self.rate.clone()
    }

    /// What [`ProviderGate::before_send`] compares with: read in the same moment as
    /// [`ProviderGate::take`], before the claim statement runs, so a shut during the claim
    /// counts too.
    pub fn shut_count(&self) -> ShutCount {
        ShutCount(self.shut_count)
    }

    /// A claimed request is about to be sent: with a rate limit it has just taken its
    /// token (`waited`: it had to wait for it). Whether it may still go: not when the
    /// breaker opened or a `Retry-After` pause began since `claimed_at` (a
    /// [`ProviderGate::shut_count`] read with the claim's [`ProviderGate::take`]). Such a
    /// request is handed back unsent, spending no attempt, and is no longer in flight: its
    /// task does not call [`ProviderGate::finish`] (it says nothing about the provider,
    /// and must not count as the half-open breaker's trial).
    pub fn before_send(&mut self, claimed_at: ShutCount, waited: bool) -> bool {
        if self.rate.is_some() {
            self.awaiting_token = self.awaiting_token.saturating_sub(1);
        }
        self.rate_limited += u64::from(waited);
        if claimed_at.0 == self.shut_count {
            return true;
        }
        self.in_flight = self.in_flight.saturating_sub(1);
        false
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Requests that may be in flight now (the send window, at most `max_in_flight`).
    pub fn window(&self) -> usize {
        self.window.size()
    }

    /// Until when the provider is paused by a `Retry-After`, if it is.
    pub fn paused_until(&self, now: Instant) -> Option<Instant> {
        self.paused_until.filter(|until| *until > now)
    }

    /// The breaker's state (an open breaker whose cool-down is over reads as half open).
    pub fn breaker(&mut self, now: Instant) -> Breaker {
        if let Breaker::Open { until } = self.breaker {
            if now >= until {
                self.breaker = Breaker::HalfOpen {
                    trial_in_flight: false,
                };
            }
        }
        self.breaker
    }

    /// How many more requests may be started now.
    pub fn available(&mut self, now: Instant) -> usize {
        if self.paused_until(now).is_some() {
            return 0;
        }
        let room = self.window.size().saturating_sub(self.in_flight);
        match self.breaker(now) {
            Breaker::Closed { .. } => room,
            Breaker::Open { .. } => 0,
            Breaker::HalfOpen { trial_in_flight } => usize::from(!trial_in_flight).min(room),
        }
    }

    /// When the gate may next open by itself (pause or cool-down over), if it is shut. (A
    /// gate shut by its rate limiter reopens when a waiting request takes its token, which
    /// wakes the claimer.)
    pub fn reopens_at(&self, now: Instant) -> Option<Instant> {
        let pause = self.paused_until(now);
        let cooldown = match self.breaker {
            Breaker::Open { until } if until > now => Some(until),
            _ => None,
        };
        pause.max(cooldown)
    }

    /// `n` requests were claimed and are about to be sent.
    pub fn start(&mut self, n: usize, now: Instant) {
        self.in_flight += n;
        if self.rate.is_some() {
            self.awaiting_token += n;
        }
        if n > 0 {
            if let Breaker::HalfOpen { .. } = self.breaker(now) {
                self.breaker = Breaker::HalfOpen {
                    trial_in_flight: true,
                };
            }
        }
    }

    /// A request finished with `signal`.
    pub fn finish(&mut self, signal: ProviderSignal, now: Instant) {
        self.in_flight = self.in_flight.saturating_sub(1);
        match signal {
            ProviderSignal::Silent => {
                if let Breaker::HalfOpen { .. } = self.breaker {
                    // The trial never went out: let another one try.
                    self.breaker = Breaker::HalfOpen {
                        trial_in_flight: false,
                    };
                }
            }
            ProviderSignal::Answered => {
                self.breaker = Breaker::Closed { failures: 0 };
                self.window.grow();
            }
            ProviderSignal::PauseFor(wait) => {
                self.window.shrink();
                let until = now + wait.min(self.limits.max_pause);
                self.paused_until = Some(self.paused_until.map_or(until, |p| p.max(until)));
                self.breaker = Breaker::Closed { failures: 0 };
                self.shut_count += 1;
            }
            ProviderSignal::Failed => self.fail(now),
        }
    }

    fn fail(&mut self, now: Instant) {
        self.window.shrink();
        if self.limits.breaker_failures == 0 {
            return;
        }
        let open = Breaker::Open {
            until: now + self.limits.breaker_cooldown,
        };
        self.breaker = match self.breaker(now) {
            Breaker::Closed { failures } if failures + 1 >= self.limits.breaker_failures => {
                tracing::warn!(cooldown = ?self.limits.breaker_cooldown, "provider failing; circuit breaker opened");
                self.window.restart();
                self.shut_count += 1;
                open
            }
            Breaker::Closed { failures } => Breaker::Closed {
                failures: failures + 1,
            },
            Breaker::HalfOpen { .. } | Breaker::Open { .. } => {
                self.window.restart();
                self.shut_count += 1;
                open
            }
        };
    }
}

#[cfg(test)]
#[path = "capacity_tests.rs"]
mod tests;
