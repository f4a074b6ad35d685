//! Tests of [`super::ProviderGate`]: bounds, pauses, the breaker and the send window.

use std::num::NonZeroU32;

use super::*;

fn limits() -> ProviderLimits {
    ProviderLimits {
        max_in_flight: 3,
        breaker_failures: 2,
        breaker_cooldown: Duration::from_secs(10),
        max_pause: Duration::from_secs(60),
        rate_limit: None,
    }
}

/// A gate whose send window has grown to `max_in_flight` (every request answered).
fn warmed(limits: ProviderLimits) -> ProviderGate {
    let (now, mut g) = (Instant::now(), ProviderGate::new(limits));
    while g.window() < limits.max_in_flight {
        let claimed_at = g.shut_count();
        g.start(1, now);
        g.before_send(claimed_at, false); // as the request's task does before it sends
        g.finish(ProviderSignal::Answered, now);
    }
    g
}

fn rate_limited(per_second: u32, burst: u32) -> ProviderGate {
    warmed(ProviderLimits {
        max_in_flight: 100,
        rate_limit: Some(RateLimit {
            per_second: NonZeroU32::new(per_second).unwrap(),
            burst: NonZeroU32::new(burst).unwrap(),
        }),
        ..limits()
    })
}

#[test]
fn with_a_rate_limit_claims_run_only_a_short_way_ahead_of_the_tokens() {
    let now = Instant::now();
    // 40/s: the tokens due within RATE_CLAIM_AHEAD (50 ms) are two, whatever the burst.
    let mut g = rate_limited(40, 10);
    assert_eq!(g.take(10, now), 2);
    let claimed_at = g.shut_count();
    g.start(2, now);
    assert_eq!(g.take(10, now), 0, "two wait for their tokens");
    assert!(
        g.before_send(claimed_at, false),
        "nothing shut the provider"
    );
    assert_eq!(
        g.take(10, now),
        1,
        "one took its token: one more may be claimed"
    );
    assert!(g.before_send(claimed_at, true));
    assert_eq!(g.rate_limited(), 1, "one request had to wait");
    assert_eq!(g.reopens_at(now), None, "the rate limiter is not a pause");
    // Without a rate limit nothing is held back.
    let mut free = warmed(ProviderLimits {
        max_in_flight: 100,
        ..limits()
    });
    assert_eq!(free.take(10, now), 10);
    assert!(free.rate_tokens().is_none());
}

#[test]
fn claims_run_fifty_milliseconds_of_tokens_ahead_and_at_least_two() {
    let now = Instant::now();
    assert_eq!(rate_limited(1000, 500).take(500, now), 50);
    assert_eq!(rate_limited(1, 60).take(500, now), 2, "two token intervals");
}

#[test]
fn a_shut_while_the_claim_statement_runs_stops_the_send_with_or_without_a_rate_limit() {
    let now = Instant::now();
    let unlimited = warmed(ProviderLimits {
        max_in_flight: 100,
        ..limits()
    });
    for mut g in [rate_limited(10, 1), unlimited] {
        for _ in 0..2 {
            let claimed_at = g.shut_count();
            g.start(1, now);
            assert!(g.before_send(claimed_at, false));
        }
        // A claim takes room; while its statement runs, both requests in flight fail
        // (breaker_failures = 2) and open the breaker.
        assert!(g.take(1, now) > 0);
        let claimed_at = g.shut_count();
        g.finish(ProviderSignal::Failed, now);
        g.finish(ProviderSignal::Failed, now);
        g.start(1, now); // the claim returns its intent
        assert!(
            !g.before_send(claimed_at, false),
            "the breaker opened meanwhile"
        );
        assert_eq!(g.in_flight(), 0, "handed back, not left in flight");
    }
}

#[test]
fn a_request_that_waited_through_a_pause_or_a_breaker_opening_is_not_sent() {
    let now = Instant::now();
    let mut g = rate_limited(10, 1);
    let claimed_at = g.shut_count();
    g.start(2, now);
    assert!(g.before_send(claimed_at, false));
    g.finish(ProviderSignal::PauseFor(Duration::from_secs(5)), now);
    assert!(
        !g.before_send(claimed_at, true),
        "the provider asked to wait meanwhile"
    );
    assert_eq!(
        g.in_flight(),
        0,
        "the one handed back is no longer in flight"
    );

    let mut g = rate_limited(10, 1);
    let claimed_at = g.shut_count();
    g.start(3, now);
    for _ in 0..2 {
        assert!(g.before_send(claimed_at, false));
        g.finish(ProviderSignal::Failed, now); // breaker_failures = 2: open
    }
    assert!(
        !g.before_send(claimed_at, true),
        "the breaker opened meanwhile"
    );
}

#[test]
fn a_stale_waiter_is_not_the_half_open_trial() {
    let now = Instant::now();
    let mut g = rate_limited(10, 1);
    let before = g.shut_count();
    g.start(3, now);
    for _ in 0..2 {
        assert!(g.before_send(before, false));
        g.finish(ProviderSignal::Failed, now); // the second opens the breaker
    }
    let later = now + Duration::from_secs(11);
    assert_eq!(g.breaker(later).as_str(), "half_open");
    assert_eq!(g.take(5, later), 0, "the waiter still counts as in flight");
    // The request claimed before the breaker opened gets its token only now: refused,
    // and it does not use up the trial.
    assert!(!g.before_send(before, true));
    assert_eq!(g.take(5, later), 1, "one trial");
    let trial = g.shut_count();
    g.start(1, later);
    assert_eq!(g.take(5, later), 0, "no second trial");
    assert!(g.before_send(trial, true), "the trial goes");
}

#[tokio::test]
async fn rate_tokens_give_the_burst_at_once_then_one_per_interval() {
    let g = rate_limited(20, 2);
    let tokens = g.rate_tokens().expect("a rate limit");
    let started = std::time::Instant::now();
    let running = std::sync::atomic::AtomicBool::new(false);
    assert_eq!(tokens.take(&running).await, Some(false), "the burst");
    assert_eq!(tokens.take(&running).await, Some(false), "the burst");
    assert_eq!(tokens.take(&running).await, Some(true), "the third waits");
    assert_eq!(tokens.take(&running).await, Some(true), "and the fourth");
    // Two tokens after the burst at 20/s: at least two intervals of 50 ms.
    assert!(
        started.elapsed() >= Duration::from_millis(95),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn in_flight_is_bounded() {
    let now = Instant::now();
    let mut g = warmed(limits());
    assert_eq!(g.available(now), 3);
    g.start(3, now);
    assert_eq!(g.available(now), 0);
    g.finish(ProviderSignal::Answered, now);
    assert_eq!(g.available(now), 1);
}

#[test]
fn retry_after_pauses_the_whole_provider_clamped() {
    let now = Instant::now();
    let mut g = warmed(limits());
    g.start(1, now);
    g.finish(ProviderSignal::PauseFor(Duration::from_secs(3600)), now);
    assert_eq!(g.available(now), 0);
    assert_eq!(g.reopens_at(now), Some(now + Duration::from_secs(60)));
    assert_eq!(
        g.available(now + Duration::from_secs(61)),
        1,
        "then half the window (3 / 2)"
    );
}

#[test]
fn breaker_opens_half_opens_and_closes() {
    let now = Instant::now();
    let mut g = warmed(limits());
    g.start(2, now);
    g.finish(ProviderSignal::Failed, now);
    assert_eq!(g.breaker(now), Breaker::Closed { failures: 1 });
    g.finish(ProviderSignal::Failed, now);
    assert!(matches!(g.breaker(now), Breaker::Open { .. }));
    assert_eq!(g.available(now), 0, "open: nothing is claimed");
    let later = now + Duration::from_secs(10);
    assert_eq!(g.available(later), 1, "half open: one trial");
    g.start(1, later);
    assert_eq!(g.available(later), 0, "only one trial at a time");
    g.finish(ProviderSignal::Failed, later);
    assert!(
        matches!(g.breaker(later), Breaker::Open { .. }),
        "a failed trial reopens"
    );
    let again = later + Duration::from_secs(10);
    g.start(1, again);
    g.finish(ProviderSignal::Answered, again);
    assert_eq!(g.breaker(again), Breaker::Closed { failures: 0 });
    assert_eq!(
        g.available(again),
        2,
        "the window restarted at the trial's one, plus one"
    );
}

#[test]
fn an_answer_resets_the_failure_count() {
    let now = Instant::now();
    let mut g = warmed(limits());
    g.start(3, now);
    g.finish(ProviderSignal::Failed, now);
    g.finish(ProviderSignal::Answered, now);
    g.finish(ProviderSignal::Failed, now);
    assert_eq!(g.breaker(now), Breaker::Closed { failures: 1 });
}

#[test]
fn a_fresh_provider_gets_one_request_until_it_answers_then_more() {
    let now = Instant::now();
    let mut g = ProviderGate::new(ProviderLimits {
        max_in_flight: 8,
        ..limits()
    });
    assert_eq!(g.available(now), 1, "start small");
    g.start(1, now);
    assert_eq!(g.available(now), 0);
    g.finish(ProviderSignal::Answered, now);
    assert_eq!(g.available(now), 2, "grows by one per answer");
    g.start(2, now);
    g.finish(ProviderSignal::Answered, now);
    g.finish(ProviderSignal::Answered, now);
    assert_eq!(g.available(now), 4);
    for _ in 0..10 {
        g.start(1, now);
        g.finish(ProviderSignal::Answered, now);
    }
    assert_eq!(g.available(now), 8, "never above max_in_flight");
}

#[test]
fn a_failure_halves_the_window() {
    let now = Instant::now();
    let mut g = ProviderGate::new(ProviderLimits {
        max_in_flight: 8,
        breaker_failures: 0,
        ..limits()
    });
    for _ in 0..7 {
        g.start(1, now);
        g.finish(ProviderSignal::Answered, now);
    }
    assert_eq!(g.available(now), 8);
    g.start(8, now);
    g.finish(ProviderSignal::Failed, now);
    assert_eq!(g.available(now), 0, "7 in flight against a window of 4");
    for _ in 0..4 {
        g.finish(ProviderSignal::Silent, now);
    }
    assert_eq!(g.available(now), 1, "3 in flight, window 4");
    g.finish(ProviderSignal::Failed, now);
    g.finish(ProviderSignal::Failed, now);
    g.finish(ProviderSignal::Failed, now);
    assert_eq!(g.available(now), 1, "never below one");
}

#[test]
fn after_the_breaker_closes_requests_start_again_one_at_a_time() {
    let now = Instant::now();
    let mut g = ProviderGate::new(limits());
    for _ in 0..3 {
        g.start(1, now);
        g.finish(ProviderSignal::Answered, now);
    }
    assert_eq!(g.available(now), 3);
    g.start(2, now);
    g.finish(ProviderSignal::Failed, now);
    g.finish(ProviderSignal::Failed, now);
    let later = now + Duration::from_secs(10);
    assert_eq!(g.available(later), 1, "the trial");
    g.start(1, later);
    assert_eq!(g.available(later), 0, "the trial is the only request");
    g.finish(ProviderSignal::Answered, later);
    assert_eq!(g.breaker(later), Breaker::Closed { failures: 0 });
    assert_eq!(
        g.available(later),
        2,
        "from one again: the trial's answer adds one"
    );
    g.start(2, later);
    g.finish(ProviderSignal::Answered, later);
    g.finish(ProviderSignal::Answered, later);
    assert_eq!(g.available(later), 3);
}

#[test]
fn a_silent_trial_lets_another_try() {
    let now = Instant::now();
    let mut g = ProviderGate::new(limits());
    g.start(2, now);
    g.finish(ProviderSignal::Failed, now);
    g.finish(ProviderSignal::Failed, now);
    let later = now + Duration::from_secs(11);
    g.start(1, later);
    g.finish(ProviderSignal::Silent, later);
    assert_eq!(g.available(later), 1);
}

#[test]
fn default_shares_of_the_slots_never_add_up_to_more_than_concurrency() {
    assert_eq!(default_max_in_flight(32, 1), 32, "one provider: every slot");
    assert_eq!(default_max_in_flight(32, 2), 16);
    assert_eq!(default_max_in_flight(32, 3), 10);
    assert_eq!(default_max_in_flight(32, 0), 32);
    assert_eq!(default_max_in_flight(2, 5), 1, "at least one each");
    for concurrency in 1..100 {
        for providers in 1..=concurrency {
            let share = default_max_in_flight(concurrency, providers);
            assert!(
                share * providers <= concurrency,
                "{concurrency} / {providers}"
            );
        }
    }
}

#[test]
fn breaker_names_are_the_published_ones() {
    let now = Instant::now();
    let names = [
        Breaker::Closed { failures: 0 }.as_str(),
        Breaker::Open { until: now }.as_str(),
        Breaker::HalfOpen {
            trial_in_flight: false,
        }
        .as_str(),
    ];
    assert_eq!(names, crate::store::schema::BREAKER_STATES);
}

#[tokio::test]
async fn a_stopping_daemon_stops_the_wait_for_a_token() {
    let g = rate_limited(1, 1);
    let tokens = g.rate_tokens().expect("a rate limit");
    let running = std::sync::atomic::AtomicBool::new(false);
    assert_eq!(tokens.take(&running).await, Some(false), "the burst");
    // The next token is a second away; the daemon stops meanwhile.
    let stopping = std::sync::atomic::AtomicBool::new(true);
    assert_eq!(tokens.take(&stopping).await, None);
}
