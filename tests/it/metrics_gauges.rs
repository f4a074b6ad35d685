//! The database-derived gauges on both backends: one replica at a time computes them (on
//! PostgreSQL the others export none, and a survivor takes over when the holder goes); an
//! age gauge keeps growing from the last known timestamp while the database cannot be
//! read, instead of freezing; finished rows never show up as gauges.

use crate::support;

use std::time::{Duration, Instant};

use outboxd::metrics::Metrics;
use outboxd::store::{GaugeRead, OutboxStore, PoolStats};
use support::harness::{Harness, REFUND};
use support::TestDb;

const DEADLINE: Duration = Duration::from_secs(30);

fn value_of(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.parse().unwrap())
}

async fn scrape(m: &Metrics, store: &dyn OutboxStore) -> String {
    m.scrape(store, PoolStats::default()).await.unwrap()
}

/// Two processes on one database: only the first computes the gauges (PostgreSQL); when it
/// goes away, the other takes over. SQLite (one dispatcher per file) always computes.
async fn one_replica_at_a_time(t: &TestDb) {
    let h = Harness::new(t).await;
    h.enqueue_simple("waiting", "unconfigured_action").await;
    let first = t.db.store();
    let other_db = t.reopen(2).await;
    let second = other_db.store();
    let now = chrono::Utc::now();
    let GaugeRead::Read(live) = first.live_gauges(now).await.unwrap() else {
        panic!("the first replica to ask computes the gauges");
    };
    assert_eq!(live.actions.len(), 1);
    assert_eq!(live.actions[0].pending, 1);
    let read = second.live_gauges(now).await.unwrap();
    if t.backend() == "sqlite" {
        assert!(matches!(read, GaugeRead::Read(_)), "{read:?}");
        return;
    }
    assert_eq!(read, GaugeRead::OtherReplica);
    // What the second replica exports: none of the database-derived series.
    let m = Metrics::new();
    let text = scrape(&m, second.as_ref()).await;
    assert!(!text.contains("outboxd_intents{"), "{text}");
    assert_eq!(value_of(&text, "outboxd_outbox_stats_leader"), Some(0.0));
    // The holder goes away (its session ends): the second takes over.
    drop(first);
    drop(h);
    let started = Instant::now();
    loop {
        if let GaugeRead::Read(live) = second.live_gauges(chrono::Utc::now()).await.unwrap() {
            assert_eq!(live.actions[0].pending, 1);
            break;
        }
        assert!(started.elapsed() < DEADLINE, "nobody took the gauges over");
        tokio::task::yield_now().await;
    }
}

/// Finished intents are not read by the gauges: after a delivery the action has no live
/// series left (the delivery is a counter the dispatcher keeps).
async fn finished_rows_are_not_gauges(t: &TestDb) {
    let h = Harness::new(t).await;
    h.enqueue_simple("done", REFUND).await;
    h.dispatcher.drain().await.unwrap();
    let GaugeRead::Read(live) = t.db.store().live_gauges(chrono::Utc::now()).await.unwrap() else {
        panic!("single process computes");
    };
    assert!(live.actions.is_empty(), "{live:?}");
}

/// The database goes away after one good read: the age keeps growing from the known
/// enqueue time (it is not frozen at the last read), failures are counted, and the last
/// success time stays where it was.
async fn ages_do_not_freeze_when_reads_fail(t: &TestDb) {
    let h = Harness::new(t).await;
    h.enqueue_simple("waiting", "unconfigured_action").await;
    let db = t.reopen(2).await;
    let store = db.store();
    let m = Metrics::new();
    let age = "outboxd_oldest_due_intent_age_seconds{action=\"unconfigured_action\"}";
    let text = scrape(&m, store.as_ref()).await;
    let first_age = value_of(&text, age).unwrap_or_else(|| panic!("{text}"));
    let success = value_of(&text, "outboxd_outbox_stats_last_success_timestamp_seconds").unwrap();
    db.close().await;
    if let outboxd::store::Database::Postgres(pool) = &t.db {
        // The gauge lock's session is not in the pool: end it as a database restart would.
        sqlx::query(
            "SELECT pg_terminate_backend(pid) FROM pg_locks \
             WHERE locktype = 'advisory' AND classid = x'6f627803'::int::oid \
               AND objid = hashtext(current_schema())::oid",
        )
        .execute(pool)
        .await
        .unwrap();
    }
    let started = Instant::now();
    let text = loop {
        let text = scrape(&m, store.as_ref()).await;
        if value_of(&text, "outboxd_outbox_stats_refresh_errors_total") >= Some(1.0) {
            break text;
        }
        assert!(started.elapsed() < DEADLINE, "no refresh failed: {text}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let later_age = value_of(&text, age).unwrap_or_else(|| panic!("{text}"));
    assert!(
        later_age >= first_age + 4.0,
        "age {first_age} then {later_age}: frozen while reads fail"
    );
    assert_eq!(
        value_of(&text, "outboxd_outbox_stats_last_success_timestamp_seconds"),
        Some(success)
    );
}

both_backends!(
    one_replica_at_a_time,
    finished_rows_are_not_gauges,
    ages_do_not_freeze_when_reads_fail,
);
