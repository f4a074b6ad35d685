//! The daemon's delivery engine ([`Dispatcher::run`], the pipeline) against fake providers
//! on loopback, on both backends: a provider never sees more than its `max_in_flight`; a
//! hanging provider does not delay another provider's deliveries; an open circuit breaker
//! stops claims for its provider (no intent spends attempts on it) and recovers; a provider
//! that fails from the start gets one request at a time (the send window starts at one), so
//! the breaker opens after exactly `breaker_failures` requests, and its trial is one
//! request; a 429 with `Retry-After` pauses the whole provider; a rate limit spaces
//! requests; on PostgreSQL, an intent committed without a wake-up waits for the next poll.
//! Every wait is a condition with a deadline.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use outboxd::action::RetrySafety;
use outboxd::dispatch::{
    ActionRuntime, ActionTable, Dispatcher, DispatcherSettings, ProviderLimits,
};
use outboxd::fake_provider::{
    FakeProvider, FakeProviderOptions, Fault, FaultRule, Matcher, RandomFaults,
};
use outboxd::intent::IntentState;
use outboxd::provider::{ProviderClient, ProviderSettings};
use outboxd::NewIntent;
use serde_json::json;
use support::harness::{
    enqueue_all_committed, enqueue_committed, operation, quick_policy, scalar, tenant,
    test_settings,
};
use support::TestDb;
use tokio::sync::{watch, Notify};

/// An action named `name` on its own provider client with `limits`.
fn action(
    name: &str,
    provider: &FakeProvider,
    limits: ProviderLimits,
    request_timeout: Duration,
) -> ActionRuntime {
    let mut settings = ProviderSettings::new(name, provider.base_url().parse().unwrap());
    settings.allow_private_addresses = true;
    settings.connect_timeout = Duration::from_millis(300);
    settings.request_timeout = request_timeout;
    settings.limits = limits;
    ActionRuntime {
        name: name.to_owned(),
        client: Arc::new(ProviderClient::new(&settings).unwrap()),
        method: reqwest::Method::POST,
        path: "/keyed/things".to_owned(),
        retry_safety: RetrySafety::IdempotentWithKey,
        reference_pointer: Some("/id".to_owned()),
        policy: quick_policy(),
        key_retention: Duration::from_secs(86_400),
        probe: None,
    }
}

fn limits(max_in_flight: usize) -> ProviderLimits {
    ProviderLimits {
        max_in_flight,
        ..ProviderLimits::default()
    }
}

/// A running pipeline; [`Running::stop`] signals shutdown and waits for it.
struct Running {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    dispatcher: Arc<Dispatcher>,
    metrics: Arc<outboxd::metrics::Metrics>,
}

async fn start(t: &TestDb, actions: Vec<ActionRuntime>, settings: DispatcherSettings) -> Running {
    let metrics = outboxd::metrics::Metrics::shared();
    let dispatcher = Arc::new(
        Dispatcher::new(
            t.db.claim_store(),
            Arc::new(ActionTable::new(actions)),
            settings,
        )
        .with_metrics(metrics.clone()),
    );
    let (stop, stopped) = watch::channel(false);
    let wakeup = outboxd::dispatch::wakeup::Wakeup::new(&t.db, Arc::new(Notify::new())).await;
    let task = tokio::spawn(dispatcher.clone().run(wakeup, stopped));
    Running {
        stop,
        task,
        dispatcher,
        metrics,
    }
}

impl Running {
    async fn stop(self) {
        self.stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("the pipeline stopped")
            .unwrap();
    }
}

async fn enqueue_n(t: &TestDb, action: &str, n: usize) {
    for i in 0..n {
        enqueue_committed(
            &t.db,
            NewIntent::new("acme", format!("{action}-{i}"), action, json!({"i": i})),
        )
        .await;
    }
}

async fn wait_for(what: &str, deadline: Duration, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + deadline;
    while !done() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn settings(concurrency: usize) -> DispatcherSettings {
    DispatcherSettings {
        concurrency,
        shutdown_grace: Duration::from_secs(2),
        lease: Duration::from_secs(60),
        ..test_settings("pipeline")
    }
}

async fn provider_never_sees_more_than_max_in_flight(t: &TestDb) {
    let provider = FakeProvider::start(FakeProviderOptions::default()).unwrap();
    provider.set_latency(Duration::from_millis(100));
    let run = start(
        t,
        vec![action(
            "capped",
            &provider,
            limits(3),
            Duration::from_secs(5),
        )],
        settings(16),
    )
    .await;
    enqueue_n(t, "capped", 15).await;
    wait_for("15 effects", Duration::from_secs(30), || {
        provider.effect_count() == 15
    })
    .await;
    run.stop().await;
    let seen = provider.max_concurrent_requests();
    assert!(
        seen <= 3,
        "the provider saw {seen} requests at once; max_in_flight is 3"
    );
    assert!(seen >= 2, "requests ran concurrently ({seen} at most)");
}

/// A provider that hangs holds only its own `max_in_flight` slots: the other provider's
/// intents are all delivered while every request to the hanging one is still open.
async fn hanging_provider_does_not_delay_another(t: &TestDb) {
    let slow = FakeProvider::start(FakeProviderOptions::default()).unwrap();
    slow.set_latency(Duration::from_secs(30));
    let fast = FakeProvider::start(FakeProviderOptions::default()).unwrap();
    let run = start(
        t,
        vec![
            action("slow", &slow, limits(4), Duration::from_secs(40)),
            action("fast", &fast, limits(64), Duration::from_secs(5)),
        ],
        DispatcherSettings {
            lease: Duration::from_secs(120),
            ..settings(16)
        },
    )
    .await;
    enqueue_n(t, "slow", 40).await;
    enqueue_n(t, "fast", 60).await;
    wait_for("60 fast effects", Duration::from_secs(20), || {
        fast.effect_count() == 60
    })
    .await;
    assert_eq!(
        slow.effect_count(),
        0,
        "the slow provider has not answered yet"
    );
    let in_flight = scalar(
        &t.db,
        "SELECT count(*) FROM outbox_intents WHERE action = 'slow' AND state = 'in_flight'",
    )
    .await;
    assert!(
        in_flight <= 4,
        "{in_flight} slow intents claimed; its max_in_flight is 4"
    );
    let states = run.dispatcher.provider_states();
    let slow_state = states.iter().find(|s| s.provider == "slow").unwrap();
    assert!(slow_state.in_flight <= 4, "{slow_state:?}");
    slow.set_latency(Duration::ZERO);
    slow.shutdown().await;
    run.stop().await;
}

/// After `breaker_failures` consecutive failures nothing more is claimed for the provider
/// until its cool-down ends; then one trial; once the provider is back, everything is
/// delivered and no intent used up its retry budget.
async fn breaker_stops_claims_and_recovers(t: &TestDb) {
    let provider = FakeProvider::start(FakeProviderOptions::default()).unwrap();
    provider.set_refusing(true).await.unwrap();
    let run = start(
        t,
        vec![action(
            "flaky",
            &provider,
            ProviderLimits {
                max_in_flight: 4,
                breaker_failures: 3,
                breaker_cooldown: Duration::from_millis(400),
                ..ProviderLimits::default()
            },
            Duration::from_secs(5),
        )],
        settings(8),
    )
    .await;
    enqueue_n(t, "flaky", 10).await;
    let started = Instant::now();
    let attempts = |t: &TestDb| {
        let db = t.db.clone();
        async move { support::harness::scalar(&db, "SELECT count(*) FROM outbox_attempts").await }
    };
    let until = Instant::now() + Duration::from_secs(10);
    while attempts(t).await < 3 {
        assert!(Instant::now() < until, "no attempts were made");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let opened = run
        .dispatcher
        .provider_states()
        .into_iter()
        .find(|s| s.provider == "flaky")
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let made = attempts(t).await;
    let elapsed = started.elapsed();
    // 3 to open it, then at most one trial per cool-down (400 ms) in the window, plus the
    // in-flight ones that were already claimed (max_in_flight 4).
    let bound = 3 + 4 + (elapsed.as_millis() / 400) as i64 + 1;
    assert!(
        made <= bound,
        "{made} attempts in {elapsed:?} with the breaker open (at most {bound}); without it \
         10 intents x 5 attempts would all be spent"
    );
    assert_ne!(opened.breaker, "closed", "{opened:?}");
    assert_eq!(
        opened.send_window, 1,
        "an opened breaker resets the window: {opened:?}"
    );
    let exported = run.metrics.encode().unwrap();
    assert!(
        exported.contains("outboxd_provider_send_window{provider=\"flaky\"} 1"),
        "/metrics shows the send window back at one request: {exported}"
    );
    assert!(
        exported.contains("outboxd_provider_breaker{provider=\"flaky\",state=\"closed\"} 0"),
        "/metrics shows the breaker is not closed: {exported}"
    );
    let failed = scalar(
        &t.db,
        "SELECT count(*) FROM outbox_intents WHERE state = 'failed'",
    )
    .await;
    assert_eq!(failed, 0, "no intent spent its budget on an open breaker");
    provider.set_refusing(false).await.unwrap();
    wait_for("10 effects after recovery", Duration::from_secs(20), || {
        provider.effect_count() == 10
    })
    .await;
    run.stop().await;
    let delivered = scalar(
        &t.db,
        "SELECT count(*) FROM outbox_intents WHERE state = 'delivered'",
    )
    .await;
    assert_eq!(delivered, 10);
}

/// A provider answering `503` from the start: the window starts at one request and stays
/// there while requests fail, so it never sees two at once, the breaker opens after
/// exactly `breaker_failures` requests (not that many plus a window already sent), and the
/// trial after the cool-down is a single request. Once it is back, everything is delivered.
async fn a_failing_provider_gets_one_request_at_a_time(t: &TestDb) {
    let provider = FakeProvider::start(FakeProviderOptions::default()).unwrap();
    provider.set_latency(Duration::from_millis(50));
    provider.set_random_faults(RandomFaults {
        seed: 7,
        probability: 1.0,
        faults: vec![Fault::StatusWithoutApply {
            status: 503,
            retry_after: None,
        }],
    });
    let run = start(
        t,
        vec![action(
            "down",
            &provider,
            ProviderLimits {
                max_in_flight: 4,
                breaker_failures: 3,
                breaker_cooldown: Duration::from_secs(2),
                ..ProviderLimits::default()
            },
            Duration::from_secs(5),
        )],
        settings(8),
    )
    .await;
    enqueue_n(t, "down", 10).await;
    let state = |run: &Running| {
        let states = run.dispatcher.provider_states();
        let s = states.into_iter().find(|s| s.provider == "down").unwrap();
        (s.breaker, s.in_flight)
    };
    wait_for("the breaker to open", Duration::from_secs(20), || {
        state(&run) == ("open", 0)
    })
    .await;
    assert_eq!(
        (provider.request_count(), provider.max_concurrent_requests()),
        (3, 1),
        "requests until the breaker opened, and the most at once"
    );
    wait_for("the trial to fail", Duration::from_secs(20), || {
        provider.request_count() > 3 && state(&run) == ("open", 0)
    })
    .await;
    assert_eq!(
        (provider.request_count(), provider.max_concurrent_requests()),
        (4, 1),
        "one trial request after the cool-down"
    );
    provider.clear_random_faults();
    wait_for("10 effects after recovery", Duration::from_secs(30), || {
        provider.effect_count() == 10
    })
    .await;
    run.stop().await;
    let failed = scalar(
        &t.db,
        "SELECT count(*) FROM outbox_intents WHERE state <> 'delivered'",
    )
    .await;
    assert_eq!(failed, 0);
}

/// A 429 with `Retry-After: 1` pauses the provider: no request reaches it for a second,
/// for any intent.
async fn retry_after_pauses_the_whole_provider(t: &TestDb) {
    let provider = FakeProvider::start(FakeProviderOptions::default()).unwrap();
    provider.push_fault(FaultRule {
        matcher: Matcher::Any,
        fault: Fault::StatusWithoutApply {
            status: 429,
            retry_after: Some("1".to_owned()),
        },
        times: 1,
    });
    let run = start(
        t,
        vec![action(
            "limited",
            &provider,
            limits(1),
            Duration::from_secs(5),
        )],
        settings(8),
    )
    .await;
    enqueue_n(t, "limited", 4).await;
    wait_for("4 effects", Duration::from_secs(20), || {
        provider.effect_count() == 4
    })
    .await;
    run.stop().await;
    let requests = provider.requests();
    assert_eq!(requests.len(), 5, "one 429, then four deliveries");
    let gap = requests[1].at - requests[0].at;
    assert!(
        gap >= chrono::Duration::milliseconds(900),
        "the next request came {gap:?} after the 429 with Retry-After: 1"
    );
    let state = |op: &str| {
        let store = t.db.store();
        let op = op.to_owned();
        async move {
            store
                .find_intent(&tenant("acme"), &operation(&op))
                .await
                .unwrap()
                .unwrap()
                .state
        }
    };
    for i in 0..4 {
        assert_eq!(state(&format!("limited-{i}")).await, IntentState::Delivered);
    }
}

/// A fake provider behind the action "metered", limited to `per_second` with a burst of 1,
/// and a pipeline of `slots` slots (also the provider's `max_in_flight`) running it.
async fn metered(t: &TestDb, per_second: u32, slots: usize) -> (FakeProvider, Running) {
    let provider = FakeProvider::start(FakeProviderOptions::default()).unwrap();
    let limits = ProviderLimits {
        rate_limit: Some(outboxd::dispatch::RateLimit {
            per_second: std::num::NonZeroU32::new(per_second).unwrap(),
            burst: std::num::NonZeroU32::new(1).unwrap(),
        }),
        ..limits(slots)
    };
    let action = action("metered", &provider, limits, Duration::from_secs(5));
    let run = start(t, vec![action], settings(slots)).await;
    (provider, run)
}

/// `rate_limit = 20/s, burst 1`: twenty requests take at least 19 intervals of 50 ms, however
/// many slots are free.
async fn rate_limit_spaces_requests(t: &TestDb) {
    let (provider, run) = metered(t, 20, 16).await;
    enqueue_n(t, "metered", 20).await;
    wait_for("20 effects", Duration::from_secs(20), || {
        provider.effect_count() == 20
    })
    .await;
    let states = run.dispatcher.provider_states();
    run.stop().await;
    let requests = provider.requests();
    assert_eq!(requests.len(), 20);
    let span = requests[19].at - requests[0].at;
    assert!(
        span >= chrono::Duration::milliseconds(855),
        "20 requests at 20/s took only {span:?}"
    );
    assert!(states[0].rate_limited > 0, "{states:?}");
}

/// With a rate limit, intents are claimed a little ahead of their tokens and wait for them;
/// one still waiting when a `Retry-After` pause begins is handed back unsent, so nothing
/// reaches the provider during the pause and no attempt is spent. At 4/s two are claimed
/// ahead (at least two always are); both are committed together, so one claim takes both,
/// and the second waits 250 ms for its token: the 429 has long been answered by then.
async fn a_request_waiting_for_its_token_through_a_pause_is_not_sent(t: &TestDb) {
    let (provider, run) = metered(t, 4, 8).await;
    // Four answers grow the send window past one, so two intents can be claimed at once.
    enqueue_n(t, "metered", 4).await;
    wait_for("4 effects", Duration::from_secs(20), || {
        provider.effect_count() == 4
    })
    .await;
    provider.push_fault(FaultRule {
        matcher: Matcher::Any,
        fault: Fault::StatusWithoutApply {
            status: 429,
            retry_after: Some("1".to_owned()),
        },
        times: 1,
    });
    let both = ["paused-a", "paused-b"]
        .map(|op| NewIntent::new("acme", op, "metered", json!({"op": op})))
        .to_vec();
    enqueue_all_committed(&t.db, both).await;
    wait_for("6 effects", Duration::from_secs(20), || {
        provider.effect_count() == 6
    })
    .await;
    // The one handed back is not left counted in flight (it would hold a slot for good).
    wait_for("nothing in flight", Duration::from_secs(5), || {
        run.dispatcher.provider_states()[0].in_flight == 0
    })
    .await;
    run.stop().await;
    let requests = provider.requests();
    assert_eq!(
        requests.len(),
        7,
        "four, one 429, then the two: {requests:?}"
    );
    let gap = requests[5].at - requests[4].at;
    assert!(
        gap >= chrono::Duration::milliseconds(900),
        "a request went {gap:?} into the 1 s pause"
    );
    let store = t.db.store();
    for op in ["paused-a", "paused-b"] {
        let intent = store
            .find_intent(&tenant("acme"), &operation(op))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(intent.state, IntentState::Delivered, "{op}");
    }
}

/// A shutdown while claimed intents wait for their rate tokens hands them back at once,
/// even with a grace period shorter than the wait: they are pending again, not left leased
/// until their lease expires (which would count as an ambiguous attempt).
async fn shutdown_hands_back_requests_waiting_for_their_token(t: &TestDb) {
    let provider = FakeProvider::start(FakeProviderOptions::default()).unwrap();
    let limits = ProviderLimits {
        rate_limit: Some(outboxd::dispatch::RateLimit {
            per_second: std::num::NonZeroU32::new(1).unwrap(),
            burst: std::num::NonZeroU32::new(1).unwrap(),
        }),
        ..limits(8)
    };
    let action = action("metered", &provider, limits, Duration::from_secs(5));
    let settings = DispatcherSettings {
        shutdown_grace: Duration::from_millis(300),
        ..settings(8)
    };
    let run = start(t, vec![action], settings).await;
    // Two answers grow the window so that two can wait at once (at 1/s: two seconds).
    enqueue_n(t, "metered", 2).await;
    wait_for("2 effects", Duration::from_secs(20), || {
        provider.effect_count() == 2
    })
    .await;
    let both = ["waiting-a", "waiting-b"]
        .map(|op| NewIntent::new("acme", op, "metered", json!({"op": op})))
        .to_vec();
    enqueue_all_committed(&t.db, both).await;
    wait_for("two waiting", Duration::from_secs(10), || {
        run.dispatcher.provider_states()[0].in_flight == 2
    })
    .await;
    run.stop().await;
    let store = t.db.store();
    for op in ["waiting-a", "waiting-b"] {
        let intent = store
            .find_intent(&tenant("acme"), &operation(op))
            .await
            .unwrap()
            .unwrap();
        // Handed back (a `not_sent` attempt record), not left in flight under its lease.
        assert_eq!(intent.state, IntentState::Pending, "{op}");
    }
    assert_eq!(provider.effect_count(), 2, "neither was sent");
}

both_backends!(
    rate_limit_spaces_requests,
    shutdown_hands_back_requests_waiting_for_their_token,
    a_request_waiting_for_its_token_through_a_pause_is_not_sent,
    provider_never_sees_more_than_max_in_flight,
    hanging_provider_does_not_delay_another,
    breaker_stops_claims_and_recovers,
    a_failing_provider_gets_one_request_at_a_time,
    retry_after_pauses_the_whole_provider,
);

/// Commits one intent of `action` in a transaction whose producer turned the wake-up off
/// (`outboxd.wake_dispatchers`, migration 0013).
async fn enqueue_quietly(t: &TestDb, op: &str, action: &str) {
    let outboxd::store::Database::Postgres(pool) = &t.db else {
        unreachable!("PostgreSQL only")
    };
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("SET LOCAL outboxd.wake_dispatchers = off")
        .execute(&mut *tx)
        .await
        .unwrap();
    outboxd::enqueue(&mut tx, NewIntent::new("acme", op, action, json!({})))
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

/// PostgreSQL: an intent whose producer turned the wake-up off does not wake an idle
/// pipeline; it waits for the next poll (here a minute away), or for the next claim, which
/// another intent's wake-up starts and which takes both. With a short `poll_interval` it
/// is delivered at the next poll, with no other insert. In a database of its own, so no
/// other test's notification wakes the pipeline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_intent_committed_without_a_wake_up_waits_for_the_next_poll() {
    let Some(t) = TestDb::postgres_own_database().await else {
        return;
    };
    let provider = FakeProvider::start(FakeProviderOptions::default()).unwrap();
    let quiet = |poll_interval: Duration| DispatcherSettings {
        poll_interval,
        reclaim_every: Duration::from_secs(120),
        ..settings(8)
    };
    let make = || {
        vec![action(
            "things",
            &provider,
            limits(8),
            Duration::from_secs(5),
        )]
    };
    let run = start(&t, make(), quiet(Duration::from_secs(60))).await;
    // Idle: its first claim found nothing, so it waits for a wake-up or the poll.
    tokio::time::sleep(Duration::from_millis(500)).await;
    enqueue_quietly(&t, "quiet-1", "things").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        provider.request_count(),
        0,
        "a quiet insert woke the pipeline"
    );
    enqueue_committed(&t.db, NewIntent::new("acme", "loud-1", "things", json!({}))).await;
    wait_for("both delivered", Duration::from_secs(10), || {
        provider.effect_count() == 2
    })
    .await;
    run.stop().await;

    let run = start(&t, make(), quiet(Duration::from_millis(300))).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    enqueue_quietly(&t, "quiet-2", "things").await;
    wait_for(
        "the quiet one delivered by the poll",
        Duration::from_secs(10),
        || provider.effect_count() == 3,
    )
    .await;
    run.stop().await;
    let delivered = scalar(
        &t.db,
        "SELECT count(*) FROM outbox_intents WHERE state = 'delivered'",
    )
    .await;
    assert_eq!(delivered, 3);
}
