//! The console in headless Chromium: from the dashboard to a bulk redispatch of three
//! failed intents, which the dispatcher then delivers, with three audit entries; and the
//! command that writes the screenshots in `docs/console/`.

use std::path::PathBuf;

use outboxd::intent::IntentState;
use outboxd::store::ProviderStateRow;
use outboxd::NewIntent;
use serde_json::json;

use super::failed_intent;
use crate::support::admin::{unknown_intent, AdminServer, ACME_OPS};
use crate::support::harness::{scalar, Harness, NOTIFY, REFUND};
use crate::support::webdriver::Browser;
use crate::support::TestDb;

async fn sign_in(browser: &Browser, base: &str, token: &str) {
    browser.goto(&format!("{base}/review")).await;
    browser.type_into("#token", token).await;
    browser.click("#login").await;
    browser.wait_for_text("h1", "Dashboard").await;
}

async fn operator_bulk_redispatches_three_failed_intents(t: &TestDb) {
    let h = Harness::new(t).await;
    let mut failed = Vec::new();
    for op in ["refund-1", "refund-2", "refund-3"] {
        failed.push(failed_intent(&h, "acme", op, REFUND).await);
    }
    let globex = failed_intent(&h, "globex", "globex-refund-9", REFUND).await;
    h.enqueue_simple("delivered-1", REFUND).await;
    h.dispatcher.drain().await.unwrap();
    let server = AdminServer::start(&h.db).await;
    let Some(browser) = Browser::start().await else {
        return;
    };
    let base = server.base.clone();
    sign_in(&browser, &base, ACME_OPS).await;

    let states = browser.wait_for_text("#states", REFUND).await;
    assert_eq!(browser.text("#total-failed").await, "3", "{states}");
    assert_eq!(browser.text("#total-delivered").await, "1", "{states}");
    assert_eq!(browser.count("#chart").await, 1);
    let legend = browser.text("#chart-legend").await;
    assert!(
        legend.contains("rejected 3") && legend.contains("delivered 1"),
        "{legend}"
    );

    browser.click("header a[href='/review/intents']").await;
    browser.wait_for_text("h1", "Intents").await;
    browser.click("#f-state option[value='failed']").await;
    browser.click("#filter").await;
    let listed = browser.wait_for_text("#intents", "refund-3").await;
    assert_eq!(browser.count("#intents tbody tr").await, 3, "{listed}");
    assert!(
        !listed.contains("globex") && !listed.contains("delivered-1"),
        "{listed}"
    );

    browser.click("#bulk-redispatch").await;
    let summary = browser.wait_for_text("#summary", "will change").await;
    assert!(summary.contains("3 intent(s) will change"), "{summary}");
    assert_eq!(browser.count("#plan tbody tr.change").await, 3);
    assert_eq!(browser.count("#twice").await, 0, "issue_refund is keyed");
    assert_eq!(
        h.intent(failed[0]).await.state,
        IntentState::Failed,
        "the dry run changed nothing"
    );
    browser
        .type_into("#note", "provider fixed the 400 on their side")
        .await;
    browser.click("#confirm").await;
    browser
        .wait_for_text("#notice", "3 of 3 intent(s) changed")
        .await;

    h.dispatcher.drain().await.unwrap();
    for id in &failed {
        assert_eq!(h.intent(*id).await.state, IntentState::Delivered, "#{id}");
    }
    assert_eq!(h.intent(globex).await.state, IntentState::Failed);
    let sql = "SELECT count(*) FROM outbox_audit_log WHERE action = 'intent.redispatch'";
    assert_eq!(scalar(&h.db, sql).await, 3);

    browser
        .goto(&format!("{base}/review/audit?action=intent.redispatch"))
        .await;
    let audit = browser
        .wait_for_text("#audit", "provider fixed the 400")
        .await;
    assert_eq!(browser.count("#audit tbody tr").await, 3, "{audit}");

    browser
        .goto(&format!("{base}/review/intents/{}", failed[0]))
        .await;
    browser.wait_for_text("#why", "delivered").await;
    assert_eq!(browser.count("#attempts tbody tr").await, 2);
    browser.quit().await;
}

crate::both_backends!(operator_bulk_redispatches_three_failed_intents);

/// Writes `docs/console/dashboard.png` and `docs/console/intents.png` from a small seeded
/// data set. Run with `scripts/screenshots.sh`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "writes docs/console/*.png; run scripts/screenshots.sh"]
async fn screenshots() {
    let t = TestDb::sqlite().await;
    let h = Harness::new(&t).await;
    for n in 1..=9 {
        h.enqueue_simple(&format!("refund-{n}"), REFUND).await;
    }
    h.dispatcher.drain().await.unwrap();
    for n in 1..=3 {
        failed_intent(&h, "acme", &format!("refund-rejected-{n}"), REFUND).await;
    }
    unknown_intent(&h, "acme", "notify-lost-1").await;
    let mut later = NewIntent::new("acme", "notify-later", NOTIFY, json!({"to": "ops"}));
    later.not_before = Some(chrono::Utc::now() + chrono::Duration::hours(2));
    h.enqueue(later).await;
    // Two daemons' provider state, as their pipelines publish it.
    let now = chrono::Utc::now();
    let state = |owner: &str, provider: &str, in_flight, breaker: &str| ProviderStateRow {
        owner: owner.to_owned(),
        provider: provider.to_owned(),
        in_flight,
        max_in_flight: 64,
        send_window: Some(if breaker == "open" { 1 } else { 16 }),
        rate_limited_waits: 0,
        breaker: breaker.to_owned(),
        breaker_open_until: (breaker == "open").then(|| now + chrono::Duration::seconds(25)),
        paused_until: None,
        updated_at: now,
    };
    for owner in ["replica-1", "replica-2"] {
        let rows = [
            state(owner, "payments", 3, "closed"),
            state(owner, "notifications", 0, "open"),
        ];
        h.store
            .publish_provider_states(owner, &rows, now - chrono::Duration::hours(1))
            .await
            .unwrap();
    }
    let server = AdminServer::start(&h.db).await;
    let browser = Browser::start()
        .await
        .expect("chromium is needed for screenshots");
    sign_in(&browser, &server.base, ACME_OPS).await;
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/console");
    std::fs::create_dir_all(&dir).unwrap();
    browser.wait_for_text("#states", REFUND).await;
    browser.screenshot(&dir.join("dashboard.png")).await;
    browser
        .goto(&format!("{}/review/intents", server.base))
        .await;
    browser.wait_for_text("#intents", "refund-rejected-1").await;
    browser.screenshot(&dir.join("intents.png")).await;
    browser.quit().await;
}
