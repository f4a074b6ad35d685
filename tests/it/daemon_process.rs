//! The real `outboxd` binary under process faults: SIGKILL mid-dispatch and restart, and
//! (PostgreSQL) three processes sharing one database. Every scenario ends with the
//! invariant checker's zeros.

use crate::support;

use std::time::Duration;

use outboxd::checker::check;
use outboxd::fake_provider::{FakeProvider, FakeProviderOptions};
use outboxd::NewIntent;
use serde_json::json;
use support::daemon::{kill_mid_attempt, log_lines_containing, wait_settled, write_config, Daemon};
use support::harness::{enqueue_committed, scalar, test_actions, NOTIFY, REFUND};
use support::TestDb;

async fn enqueue_mixed(t: &TestDb, n: usize) {
    for i in 0..n {
        let action = if i % 3 == 0 { NOTIFY } else { REFUND };
        let intent = NewIntent::new(
            "acme",
            format!("op-{i}"),
            action,
            json!({"i": i, "amount": 100 + i}),
        );
        enqueue_committed(&t.db, intent).await;
    }
}

async fn assert_clean(
    t: &TestDb,
    provider: &FakeProvider,
    label: &str,
) -> outboxd::checker::CheckReport {
    let actions = test_actions(provider, Duration::from_secs(24 * 3600));
    let report = check(t.db.store().as_ref(), provider, &actions, true)
        .await
        .unwrap();
    println!("[{label} / {}] {report}", t.backend());
    assert!(report.is_clean(), "{label}: {report}");
    report
}

/// SIGKILL the daemon mid-dispatch, several times, restarting it each time: nothing lost,
/// no second effect for keyed actions, no second request for not-idempotent ones (those
/// interrupted mid-attempt wait in reconciliation).
async fn sigkill_mid_dispatch_and_restart(t: &TestDb) {
    let provider = FakeProvider::start(FakeProviderOptions::default()).unwrap();
    provider.set_latency(Duration::from_millis(15));
    let dir = tempfile::tempdir().unwrap();
    let total = 300;
    enqueue_mixed(t, total).await;
    for (round, target) in [40usize, 120, 200].into_iter().enumerate() {
        // An owner name per process, so the claims counted are this process's own.
        let owner = format!("killed-{round}");
        let config = write_config(dir.path(), &owner, &t.url, &provider);
        let mut daemon = Daemon::start(&config);
        assert!(
            provider
                .wait_for_requests(target, Duration::from_secs(60))
                .await,
            "round {round}: daemon made no progress"
        );
        daemon.assert_running(&owner);
        let in_flight = kill_mid_attempt(daemon, &t.db, &owner, Duration::from_secs(30)).await;
        println!(
            "round {round}: killed after {} requests with {in_flight} intents in flight",
            provider.request_count()
        );
        assert!(
            in_flight > 0,
            "round {round}: the daemon was killed with nothing in flight: the test killed nothing mid-attempt"
        );
    }
    let config = write_config(dir.path(), "killed-final", &t.url, &provider);
    let daemon = Daemon::start(&config);
    assert!(
        wait_settled(&t.db, Duration::from_secs(90)).await,
        "outbox did not settle after restart"
    );
    assert!(daemon.terminate(), "daemon did not exit 0 on SIGTERM");
    let report = assert_clean(t, &provider, "sigkill").await;
    assert_eq!(report.committed, total);
    assert_eq!(report.delivered + report.unknown + report.failed, total);
}

/// SIGTERM: the daemon stops claiming, finishes in-flight attempts and exits 0.
async fn sigterm_drains_and_exits_zero(t: &TestDb) {
    let provider = FakeProvider::start(FakeProviderOptions::default()).unwrap();
    provider.set_latency(Duration::from_millis(20));
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "drained", &t.url, &provider);
    enqueue_mixed(t, 100).await;
    let daemon = Daemon::start(&config);
    assert!(
        provider
            .wait_for_requests(10, Duration::from_secs(60))
            .await
    );
    assert!(daemon.terminate(), "exit status after SIGTERM");
    let in_flight = scalar(
        &t.db,
        "SELECT count(*) FROM outbox_intents WHERE state = 'in_flight'",
    )
    .await;
    assert_eq!(in_flight, 0, "a graceful stop leaves no claim behind");
    let open_attempts = scalar(
        &t.db,
        "SELECT count(*) FROM outbox_intents WHERE attempt_started_at IS NOT NULL",
    )
    .await;
    assert_eq!(open_attempts, 0);
    // Every attempt a claim opened was written when it ended (outcome or release).
    let claimed_attempts = scalar(
        &t.db,
        "SELECT coalesce(sum(attempt_count), 0) FROM outbox_intents",
    )
    .await;
    let attempt_rows = scalar(&t.db, "SELECT count(*) FROM outbox_attempts").await;
    assert_eq!(attempt_rows, claimed_attempts);
    let daemon = Daemon::start(&config);
    assert!(wait_settled(&t.db, Duration::from_secs(60)).await);
    drop(daemon);
    let report = assert_clean(t, &provider, "sigterm").await;
    assert_eq!(report.unknown, 0, "a graceful stop makes nothing ambiguous");
}

both_backends!(
    sigkill_mid_dispatch_and_restart,
    sigterm_drains_and_exits_zero
);

/// PostgreSQL: three dispatcher processes on one database deliver 2,000 intents; no intent
/// is attempted twice, every effect happens once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_share_one_postgres() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let provider = FakeProvider::start(FakeProviderOptions::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for i in 0..2000 {
        let intent = NewIntent::new("acme", format!("op-{i}"), REFUND, json!({"i": i}));
        enqueue_committed(&t.db, intent).await;
    }
    let daemons: Vec<Daemon> = (0..3)
        .map(|n| {
            Daemon::start(&write_config(
                dir.path(),
                &format!("replica-{n}"),
                &t.url,
                &provider,
            ))
        })
        .collect();
    assert!(
        wait_settled(&t.db, Duration::from_secs(120)).await,
        "replicas did not finish"
    );
    for d in daemons {
        assert!(d.terminate());
    }
    let report = assert_clean(&t, &provider, "three replicas").await;
    assert_eq!(
        (report.delivered, report.effects, report.requests),
        (2000, 2000, 2000)
    );
    let attempts = scalar(&t.db, "SELECT count(*) FROM outbox_attempts").await;
    assert_eq!(attempts, 2000, "no intent was attempted twice");
    let owners = scalar(&t.db, "SELECT count(DISTINCT owner) FROM outbox_attempts").await;
    println!("three replicas: attempts by {owners} distinct owners");
    assert!(owners >= 2, "the work was shared between replicas");
}

/// What the dispatcher logs (at debug) when nothing is in flight or claimable and it waits.
const IDLE_LOG: &str = "idle: waiting for a wake-up or the next poll";

/// PostgreSQL: an idle daemon is woken by NOTIFY on enqueue, not by its polling fallback.
/// One lane, a 60 s poll interval and a 60 s reclaim interval; each intent is enqueued only
/// once the lane has logged that it is idle (after the previous delivery it stepped again
/// and found nothing), so nothing but the NOTIFY can make it claim within seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_wakes_an_idle_daemon() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let provider = FakeProvider::start(FakeProviderOptions::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "listener", &t.url, &provider);
    let text = std::fs::read_to_string(&config).unwrap();
    let text = text
        .replace("poll_interval = \"100ms\"", "poll_interval = \"60s\"")
        .replace(
            "release_expired_every = \"1s\"",
            "release_expired_every = \"60s\"",
        )
        .replace("concurrency = 16", "concurrency = 20")
        .replace(
            "level = \"warn\"",
            "level = \"warn,outboxd::dispatch::pipeline=debug\"",
        );
    std::fs::write(&config, text).unwrap();
    let mut daemon = Daemon::start(&config);
    for i in 0..5 {
        // Idle once at start, then once after each delivery.
        let idle = wait_for_log(&config, IDLE_LOG, i + 1, Duration::from_secs(30)).await;
        daemon.assert_running("listener");
        assert!(idle, "intent {i}: the daemon never logged that it was idle");
        let intent = NewIntent::new("acme", format!("wake-{i}"), REFUND, json!({"i": i}));
        enqueue_committed(&t.db, intent).await;
        assert!(
            provider.wait_for_effects(i + 1, Duration::from_secs(10)).await,
            "intent {i} was not delivered within 10 s of enqueue into an idle daemon: the NOTIFY wake-up was lost (polling is every 60 s)"
        );
    }
    assert!(daemon.terminate());
    assert_clean(&t, &provider, "notify").await;
}

/// Waits (up to `limit`) until the daemon's log has at least `n` lines containing `needle`.
async fn wait_for_log(config: &std::path::Path, needle: &str, n: usize, limit: Duration) -> bool {
    let until = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < until {
        if log_lines_containing(config, needle) >= n {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}
