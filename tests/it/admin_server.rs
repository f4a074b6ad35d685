//! The admin server's health, readiness and metrics routes on a real database of each
//! backend, served on 127.0.0.1:0: readiness follows the database, the schema version and
//! the drain; metrics follow what the dispatcher did and what the outbox holds.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use outboxd::api::server::mark_draining_on;
use outboxd::api::{router, AdminServer, ApiState};
use outboxd::config::Config;
use outboxd::dispatch::Dispatcher;
use outboxd::fake_provider::{Fault, FaultRule, Matcher};
use outboxd::metrics::Metrics;
use outboxd::store::migrate::expected_version;
use outboxd::store::{ClaimRequest, Database};
use outboxd::NewIntent;
use serde_json::{json, Value};
use support::harness::{exec, test_settings, Harness, NOTIFY, REFUND};
use support::TestDb;

async fn serve(db: Database, metrics: Arc<Metrics>) -> (AdminServer, ApiState, String) {
    let state = ApiState::new(db, Arc::new(Config::default()), metrics);
    let server = AdminServer::bind("127.0.0.1:0".parse().unwrap(), router(state.clone()))
        .await
        .expect("bind the admin server");
    let base = format!("http://{}", server.local_addr());
    (server, state, base)
}

async fn get(url: &str) -> (u16, String) {
    let response = support::admin::http_client()
        .get(url)
        .send()
        .await
        .expect("GET");
    (response.status().as_u16(), response.text().await.unwrap())
}

async fn readiness(base: &str) -> (u16, Value) {
    let (status, body) = get(&format!("{base}/readyz")).await;
    (
        status,
        serde_json::from_str(&body).expect("readiness is JSON"),
    )
}

/// Healthy, then a schema from the future, then draining: 503 each time with a reason;
/// liveness never changes.
async fn readiness_follows_schema_and_drain(t: &TestDb) {
    let (server, state, base) = serve(t.db.clone(), Metrics::shared()).await;
    assert_eq!(
        get(&format!("{base}/healthz")).await,
        (200, "ok".to_owned())
    );
    let (status, body) = readiness(&base).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["ready"], true);
    assert_eq!(body["schema_version"], expected_version());
    assert_eq!(body["backend"], t.backend());

    exec(
        &t.db,
        "INSERT INTO outboxd_schema_migrations (version, name, checksum, applied_at) VALUES (999, 'future', 'x', 0)",
        "INSERT INTO outboxd_schema_migrations (version, name, checksum) VALUES (999, 'future', 'x')",
    )
    .await;
    let (status, body) = readiness(&base).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["schema_version"], 999);
    assert!(
        body["reason"]
            .as_str()
            .unwrap()
            .contains("runs on versions"),
        "{body}"
    );
    let delete = "DELETE FROM outboxd_schema_migrations WHERE version = 999";
    exec(&t.db, delete, delete).await;
    assert_eq!(readiness(&base).await.0, 200);

    let (tx, rx) = tokio::sync::watch::channel(false);
    mark_draining_on(&state, rx);
    tx.send(true).unwrap();
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    while !state.is_draining() {
        assert!(tokio::time::Instant::now() < until, "never marked draining");
        tokio::task::yield_now().await;
    }
    let (status, body) = readiness(&base).await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body["reason"].as_str().unwrap().starts_with("draining"),
        "{body}"
    );
    assert_eq!(
        get(&format!("{base}/healthz")).await.0,
        200,
        "liveness is unaffected"
    );
    server.stop().await;
}

/// A database that cannot be reached makes the process unready, not dead.
async fn unreachable_database_is_unready(t: &TestDb) {
    let closed = t.reopen(2).await;
    let (server, _state, base) = serve(closed.clone(), Metrics::shared()).await;
    assert_eq!(readiness(&base).await.0, 200);
    closed.close().await;
    let (status, body) = readiness(&base).await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body["reason"].as_str().unwrap().contains("unreachable"),
        "{body}"
    );
    assert_eq!(get(&format!("{base}/healthz")).await.0, 200);
    server.stop().await;
}

fn value_of(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in:\n{metrics}"))
        .parse()
        .unwrap()
}

/// A lost response (keyed: retried), a 500 (not idempotent: reconciliation), a clean
/// delivery, a lease that expired under a vanished owner, and an intent nobody can send.
async fn drive_scenarios(h: &Harness, d: &Dispatcher) {
    let waiting = NewIntent::new("acme", "waits", "unconfigured_action", json!({"x": 1}));
    h.enqueue(waiting).await;
    let lost = h.enqueue_simple("lost", REFUND).await;
    let notify = h.enqueue_simple("notify", NOTIFY).await;
    h.enqueue_simple("clean", REFUND).await;
    for (key, fault) in [
        (lost.idempotency_key, Fault::LoseResponseAfterApply),
        (notify.idempotency_key, Fault::Status500AfterApply),
    ] {
        h.provider.push_fault(FaultRule {
            matcher: Matcher::Key(key),
            fault,
            times: 1,
        });
    }
    assert_eq!(d.run_once().await.unwrap().claimed, 3);
    h.make_due().await;
    d.drain().await.unwrap();
    h.enqueue_simple("orphaned", REFUND).await;
    let ghost = ClaimRequest {
        owner: "vanished".into(),
        lease: Duration::from_secs(60),
        limit: 10,
        actions: h.actions.names(),
        now: chrono::Utc::now(),
    };
    assert_eq!(h.store.claim_due(&ghost).await.unwrap().len(), 1);
    h.expire_leases().await;
    assert_eq!(d.run_once().await.unwrap().reclaimed, 1);
    h.make_due().await;
    d.drain().await.unwrap();
}

/// Attempts by class, latencies, claim sizes, lease expiries, outcome write delays and the
/// outbox gauges after [`drive_scenarios`], as scraped from `/metrics`.
async fn metrics_follow_dispatcher_and_outbox(t: &TestDb) {
    let h = Harness::new(t).await;
    let metrics = Metrics::shared();
    let d = Dispatcher::new(
        h.db.claim_store(),
        h.actions.clone(),
        test_settings("metrics"),
    )
    .with_metrics(metrics.clone());
    drive_scenarios(&h, &d).await;
    // The open item was opened an hour ago: the age gauge must say so (not merely >= 0).
    support::harness::exec(
        &h.db,
        "UPDATE outbox_reconciliation_items SET opened_at = opened_at - 3600000",
        "UPDATE outbox_reconciliation_items SET opened_at = opened_at - interval '1 hour'",
    )
    .await;
    let (server, _state, base) = serve(t.db.clone(), metrics).await;
    let (status, text) = get(&format!("{base}/metrics")).await;
    assert_eq!(status, 200);
    let value = |series: &str| value_of(&text, series);
    let attempts = |action: &str, class: &str| {
        value(&format!(
            "outboxd_attempts_total{{action=\"{action}\",provider=\"fake\",class=\"{class}\"}}"
        ))
    };
    assert_eq!(attempts(REFUND, "ambiguous"), 1.0);
    assert_eq!(
        attempts(REFUND, "delivered"),
        3.0,
        "lost (retried), clean, orphaned"
    );
    assert_eq!(attempts(NOTIFY, "ambiguous"), 1.0);
    assert_eq!(value("outboxd_lease_expiries_total"), 1.0);
    let first = format!(
        "outboxd_enqueue_to_first_attempt_seconds_count{{action=\"{REFUND}\",provider=\"fake\"}}"
    );
    assert_eq!(
        value(&first),
        2.0,
        "orphaned's first attempt was the ghost's"
    );
    let latency =
        format!("outboxd_delivery_duration_seconds_count{{action=\"{REFUND}\",provider=\"fake\"}}");
    assert_eq!(value(&latency), 4.0);
    assert!(value("outboxd_claim_batch_size_sum") >= 5.0);
    // Every attempt's outcome recorded, each once; not the takeover's (no attempt ended).
    assert_eq!(
        value("outboxd_outcome_write_delay_seconds_count"),
        5.0,
        "lost (twice), notify, clean, orphaned"
    );
    let waited = value("outboxd_outcome_write_delay_seconds_sum");
    assert!((0.0..25.0).contains(&waited), "{waited} s in all");
    // Finished intents are counters of what this process recorded, never row counts.
    let finished = |action: &str, state: &str| {
        value(&format!(
            "outboxd_intents_finished_total{{action=\"{action}\",provider=\"fake\",state=\"{state}\"}}"
        ))
    };
    assert_eq!(
        finished(REFUND, "delivered"),
        3.0,
        "lost (retried), clean, orphaned"
    );
    assert_eq!(finished(NOTIFY, "unknown"), 1.0);
    assert!(!text.contains("state=\"delivered\",action="), "{text}");
    // The live gauges carry the action; the unconfigured action's backlog is its own series.
    let live = |state: &str, action: &str| {
        value(&format!(
            "outboxd_intents{{state=\"{state}\",action=\"{action}\"}}"
        ))
    };
    assert_eq!(live("unknown", NOTIFY), 1.0);
    assert_eq!(live("pending", "unconfigured_action"), 1.0);
    assert_eq!(
        value(&format!(
            "outboxd_reconciliation_open_items{{action=\"{NOTIFY}\"}}"
        )),
        1.0
    );
    let age = value(&format!(
        "outboxd_reconciliation_oldest_age_seconds{{action=\"{NOTIFY}\"}}"
    ));
    assert!(
        (3600.0..3900.0).contains(&age),
        "oldest open item age {age}"
    );
    let due = "outboxd_oldest_due_intent_age_seconds{action=\"unconfigured_action\"}";
    assert!(value(due) > 0.0);
    let due_at = value("outboxd_oldest_due_timestamp_seconds{action=\"unconfigured_action\"}");
    let now = chrono::Utc::now().timestamp_millis() as f64 / 1000.0;
    assert!((now - 600.0..=now).contains(&due_at), "due since {due_at}");
    assert_eq!(value("outboxd_outbox_stats_leader"), 1.0);
    assert!(value("outboxd_db_pool_max_connections") >= 1.0);
    assert_eq!(value("outboxd_outbox_stats_refresh_errors_total"), 0.0);
    server.stop().await;
}

both_backends!(
    readiness_follows_schema_and_drain,
    unreachable_database_is_unready,
    metrics_follow_dispatcher_and_outbox,
);
