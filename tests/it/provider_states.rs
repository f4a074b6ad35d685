//! Per-provider state outside the daemon's memory, on both backends: the store keeps each
//! owner's published rows (replaced, withdrawn, forgotten when old); a running pipeline
//! publishes its breaker opening within moments, its send window as it grows, and withdraws
//! its rows when it stops; `outboxd status` text and JSON and `GET /v1/providers` show the
//! rows (send window included) with their age and mark a dead replica's rows stale.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use outboxd::action::RetrySafety;
use outboxd::dispatch::{ActionRuntime, ActionTable, Dispatcher, ProviderLimits};
use outboxd::fake_provider::{FakeProvider, FakeProviderOptions};
use outboxd::provider::{ProviderClient, ProviderSettings};
use outboxd::store::{OutboxStore, ProviderStateRow};
use outboxd::NewIntent;
use reqwest::StatusCode;
use serde_json::json;
use support::admin::{AdminServer, ACME_VIEWER};
use support::cli::Cli;
use support::harness::{enqueue_committed, quick_policy, test_settings};
use support::TestDb;
use tokio::sync::{watch, Notify};

fn row(owner: &str, provider: &str, breaker: &str, age: chrono::Duration) -> ProviderStateRow {
    let now = Utc::now();
    ProviderStateRow {
        owner: owner.to_owned(),
        provider: provider.to_owned(),
        in_flight: 3,
        max_in_flight: 8,
        send_window: Some(5),
        rate_limited_waits: 2,
        breaker: breaker.to_owned(),
        breaker_open_until: (breaker == "open").then(|| now + chrono::Duration::seconds(20)),
        paused_until: None,
        updated_at: now - age,
    }
}

fn trimmed(rows: Vec<ProviderStateRow>) -> Vec<(String, String, String)> {
    rows.into_iter()
        .map(|r| (r.provider, r.owner, r.breaker))
        .collect()
}

fn ms(row: &ProviderStateRow) -> i64 {
    row.updated_at.timestamp_millis()
}

async fn the_store_keeps_each_owners_latest_rows(t: &TestDb) {
    let store = t.db.store();
    let never = Utc::now() - chrono::Duration::days(1);
    let zero = chrono::Duration::zero();
    let a = [
        row("a", "pay", "closed", zero),
        row("a", "mail", "open", zero),
    ];
    store.publish_provider_states("a", &a, never).await.unwrap();
    let b = [row("b", "pay", "half_open", zero)];
    store.publish_provider_states("b", &b, never).await.unwrap();
    let listed = store.list_provider_states().await.unwrap();
    assert_eq!(listed.len(), 3);
    let mail = listed.iter().find(|r| r.provider == "mail").unwrap();
    assert_eq!(
        mail.breaker_open_until.map(|t| t.timestamp()),
        a[1].breaker_open_until.map(|t| t.timestamp())
    );
    assert_eq!(ms(mail), ms(&a[1]));
    assert_eq!(
        (
            mail.in_flight,
            mail.max_in_flight,
            mail.send_window,
            mail.rate_limited_waits
        ),
        (3, 8, Some(5), 2)
    );
    assert_eq!(
        trimmed(listed),
        [
            ("mail", "a", "open"),
            ("pay", "a", "closed"),
            ("pay", "b", "half_open")
        ]
        .map(|(p, o, b)| (p.to_owned(), o.to_owned(), b.to_owned()))
        .to_vec()
    );
    // A new publication replaces the owner's rows (a provider no longer there goes).
    let a2 = [row("a", "pay", "open", zero)];
    store
        .publish_provider_states("a", &a2, never)
        .await
        .unwrap();
    assert_eq!(store.list_provider_states().await.unwrap().len(), 2);
    // A row older than `forget_before` is deleted by anyone's next publication.
    let dead = [row("dead", "pay", "closed", chrono::Duration::hours(2))];
    store
        .publish_provider_states("dead", &dead, never)
        .await
        .unwrap();
    assert_eq!(store.list_provider_states().await.unwrap().len(), 3);
    let hour_ago = Utc::now() - chrono::Duration::hours(1);
    store
        .publish_provider_states("b", &b, hour_ago)
        .await
        .unwrap();
    let owners: Vec<String> = store
        .list_provider_states()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.owner)
        .collect();
    assert_eq!(owners, ["a", "b"]);
    store.withdraw_provider_states("a").await.unwrap();
    assert_eq!(
        trimmed(store.list_provider_states().await.unwrap()).len(),
        1
    );
}

/// `flaky_action` on provider `flaky` (at `provider`), with at most `max_in_flight`
/// requests in flight and a breaker opening after two failures.
fn flaky_action(provider: &FakeProvider, max_in_flight: usize) -> ActionRuntime {
    let mut settings = ProviderSettings::new("flaky", provider.base_url().parse().unwrap());
    settings.allow_private_addresses = true;
    settings.connect_timeout = Duration::from_millis(300);
    settings.request_timeout = Duration::from_secs(2);
    settings.limits = ProviderLimits {
        max_in_flight,
        breaker_failures: 2,
        breaker_cooldown: Duration::from_secs(600),
        ..ProviderLimits::default()
    };
    ActionRuntime {
        name: "flaky_action".to_owned(),
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

async fn wait_for_rows(
    store: &dyn OutboxStore,
    what: &str,
    done: impl Fn(&[ProviderStateRow]) -> bool,
) -> Vec<ProviderStateRow> {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let rows = store.list_provider_states().await.unwrap();
        if done(&rows) {
            return rows;
        }
        assert!(
            Instant::now() < until,
            "timed out waiting for {what}: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn a_running_pipeline_publishes_its_breaker_and_withdraws_on_stop(t: &TestDb) {
    let provider = FakeProvider::start(FakeProviderOptions::default()).unwrap();
    provider.set_refusing(true).await.unwrap();
    let store = t.db.store();
    let dispatcher = Arc::new(Dispatcher::new(
        t.db.claim_store(),
        Arc::new(ActionTable::new([flaky_action(&provider, 2)])),
        test_settings("publisher"),
    ));
    let (stop, stopped) = watch::channel(false);
    let wakeup = outboxd::dispatch::wakeup::Wakeup::new(&t.db, Arc::new(Notify::new())).await;
    let task = tokio::spawn(dispatcher.clone().run(wakeup, stopped));
    let first = wait_for_rows(store.as_ref(), "the first publication", |rows| {
        !rows.is_empty()
    })
    .await;
    assert_eq!(first[0].owner, "publisher");
    assert_eq!(first[0].provider, "flaky");
    assert_eq!(first[0].max_in_flight, 2);
    assert_eq!(
        first[0].send_window,
        Some(1),
        "a window starts at one request"
    );
    for i in 0..4 {
        enqueue_committed(
            &t.db,
            NewIntent::new("acme", format!("op-{i}"), "flaky_action", json!({"i": i})),
        )
        .await;
    }
    // The breaker opens after two refused connections; the change is published within a
    // publisher check, long before the 5 s refresh.
    let open = wait_for_rows(store.as_ref(), "the open breaker", |rows| {
        rows.iter().any(|r| r.breaker == "open")
    })
    .await;
    let open = &open[0];
    assert!(
        open.breaker_open_until.is_some_and(|u| u > Utc::now()),
        "{open:?}"
    );

    // The admin API and the status output show the same rows.
    let server = AdminServer::start(&t.db).await;
    let (status, body) = server.api(Some(ACME_VIEWER)).get("/v1/providers").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let listed = body["providers"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{body}");
    assert_eq!(listed[0]["breaker"], "open");
    assert_eq!(listed[0]["owner"], "publisher");
    assert_eq!(listed[0]["stale"], false);
    assert_eq!(
        listed[0]["send_window"], 1,
        "reset by the opening breaker: {body}"
    );
    let rows = store.list_provider_states().await.unwrap();
    let text = outboxd::status::render_providers(&rows, Utc::now());
    assert!(
        text.contains("flaky") && text.contains("breaker open"),
        "{text}"
    );
    assert!(!text.contains("STALE"), "{text}");
    let summary = store.status_summary(Utc::now()).await.unwrap();
    let json = outboxd::status::providers_json(&rows, Utc::now());
    assert_eq!(json[0]["breaker"], "open", "{json}");
    assert_eq!(json[0]["send_window"], 1, "{json}");
    let count = |state: &str| {
        summary
            .by_state
            .iter()
            .find(|(s, _)| s.as_str() == state)
            .map_or(0, |(_, n)| *n)
    };
    let waiting = count("pending") + count("in_flight");
    assert_eq!(
        waiting, 4,
        "nothing spent its budget on an open breaker: {summary:?}"
    );

    stop.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the pipeline stopped")
        .unwrap();
    assert!(
        store.list_provider_states().await.unwrap().is_empty(),
        "a stopping daemon deletes its rows"
    );
}

/// A healthy provider's window grows by one per answered request up to `max_in_flight`; the
/// publisher writes it, and the real `outboxd status` (text and `--json`) and
/// `GET /v1/providers` show it beside in flight / max.
async fn a_running_pipeline_publishes_its_send_window(t: &TestDb) {
    let provider = FakeProvider::start(FakeProviderOptions::default()).unwrap();
    let store = t.db.store();
    let dispatcher = Arc::new(Dispatcher::new(
        t.db.claim_store(),
        Arc::new(ActionTable::new([flaky_action(&provider, 3)])),
        test_settings("windowed"),
    ));
    let (stop, stopped) = watch::channel(false);
    let wakeup = outboxd::dispatch::wakeup::Wakeup::new(&t.db, Arc::new(Notify::new())).await;
    let task = tokio::spawn(dispatcher.clone().run(wakeup, stopped));
    for i in 0..6 {
        enqueue_committed(
            &t.db,
            NewIntent::new("acme", format!("op-{i}"), "flaky_action", json!({"i": i})),
        )
        .await;
    }
    // Six answers take the window from 1 to its cap; the next refresh publishes it.
    let grown = wait_for_rows(store.as_ref(), "the grown window", |rows| {
        rows.iter().any(|r| r.send_window == Some(3))
    })
    .await;
    assert_eq!(
        (grown[0].provider.as_str(), grown[0].max_in_flight),
        ("flaky", 3)
    );

    let cli = Cli::new(t);
    let text = cli.ok(&["status"]).await;
    let line = text
        .lines()
        .find(|l| l.contains("flaky") && l.contains("owner windowed"))
        .unwrap_or_else(|| panic!("no provider line:\n{text}"));
    assert!(line.contains("window 3/3"), "{line}");
    let status = cli.json(&["status", "--json"]).await;
    assert_eq!(status["providers"][0]["send_window"], 3, "{status}");
    assert_eq!(status["providers"][0]["max_in_flight"], 3, "{status}");
    let server = AdminServer::start(&t.db).await;
    let (code, body) = server.api(Some(ACME_VIEWER)).get("/v1/providers").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["providers"][0]["send_window"], 3, "{body}");

    stop.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the pipeline stopped")
        .unwrap();
}

/// A row an older release published has no window: it reads as absent, shows as unknown
/// in the text, and as null in the JSON.
async fn a_row_without_a_window_reads_as_absent(t: &TestDb) {
    let store = t.db.store();
    let mut old = row("older", "pay", "closed", chrono::Duration::zero());
    old.send_window = None;
    store
        .publish_provider_states("older", &[old], Utc::now() - chrono::Duration::hours(1))
        .await
        .unwrap();
    let rows = store.list_provider_states().await.unwrap();
    assert_eq!(rows[0].send_window, None, "{rows:?}");
    let text = outboxd::status::render_providers(&rows, Utc::now());
    assert!(text.contains("window unknown"), "{text}");
    let json = outboxd::status::providers_json(&rows, Utc::now());
    assert!(json[0]["send_window"].is_null(), "{json}");
    assert!(json[0].as_object().unwrap().contains_key("send_window"));
}

async fn a_dead_replicas_rows_show_as_stale(t: &TestDb) {
    let store = t.db.store();
    let old = [row("gone", "pay", "closed", chrono::Duration::minutes(5))];
    store
        .publish_provider_states("gone", &old, Utc::now() - chrono::Duration::hours(1))
        .await
        .unwrap();
    let rows = store.list_provider_states().await.unwrap();
    let text = outboxd::status::render_providers(&rows, Utc::now());
    assert!(text.contains("STALE"), "{text}");
    assert!(text.contains("updated 5m"), "{text}");
    let server = AdminServer::start(&t.db).await;
    let (_, body) = server.api(Some(ACME_VIEWER)).get("/v1/providers").await;
    assert_eq!(body["providers"][0]["stale"], true, "{body}");
    assert!(body["providers"][0]["age_seconds"].as_i64().unwrap() >= 300);
    assert!(outboxd::status::render_providers(&[], Utc::now()).contains("none published"));
}

both_backends!(
    the_store_keeps_each_owners_latest_rows,
    a_running_pipeline_publishes_its_breaker_and_withdraws_on_stop,
    a_running_pipeline_publishes_its_send_window,
    a_row_without_a_window_reads_as_absent,
    a_dead_replicas_rows_show_as_stale,
);
