//! The review page. In a real headless Chromium (driven over WebDriver): sign in with a
//! token, find the unknown item in the queue, read its attempt history, resolve it as
//! delivered with a reference and a note, see it leave the queue and the audit entry
//! appear, sign out. Over plain HTTP (`review_page/forms.rs`): the cookie's flags, CSRF,
//! viewers, the 409 notice, HTML escaping (`review_page/hostile.rs`: every field, text and
//! attributes) and tenant isolation.

use crate::support;

#[path = "review_page/forms.rs"]
mod forms;
#[path = "review_page/hostile.rs"]
mod hostile;
#[path = "review_page/not_found.rs"]
mod not_found;
#[path = "review_page/page.rs"]
pub(crate) mod page;

use std::path::PathBuf;

use outboxd::intent::IntentState;
use support::admin::{unknown_intent, AdminServer, ACME_OPS};
use support::harness::Harness;
use support::webdriver::Browser;
use support::TestDb;

async fn operator_resolves_an_unknown_outcome_in_the_browser(t: &TestDb) {
    let h = Harness::new(t).await;
    let (intent_id, item_id) = unknown_intent(&h, "acme", "refund-order-4711").await;
    let (_, other_item) = unknown_intent(&h, "globex", "globex-secret-op").await;
    let key = h.intent(intent_id).await.idempotency_key.to_string();
    let reference = h.provider.effects_for_key(&key)[0].reference.clone();
    let server = AdminServer::start(&h.db).await;
    let Some(browser) = Browser::start().await else {
        return;
    };
    let review = format!("{}/review", server.base);

    browser.goto(&review).await;
    browser.type_into("#token", ACME_OPS).await;
    browser.click("#login").await;
    browser.wait_for_text("#who", "acme-ops").await;
    browser.click("header a[href='/review/queue']").await;
    let queue = browser.wait_for_text("#queue", "refund-order-4711").await;
    assert!(
        queue.contains("send_notification") && queue.contains("acme"),
        "{queue}"
    );
    assert!(
        !queue.contains("globex-secret-op"),
        "another tenant's item is hidden"
    );
    assert_eq!(browser.count(&format!("#item-{other_item}")).await, 0);

    browser.click(&format!("#item-{item_id} a")).await;
    let attempts = browser.wait_for_text("#attempts", "ambiguous").await;
    assert_eq!(browser.count("#attempts tbody tr").await, 1, "{attempts}");
    let facts = browser.text("#facts").await;
    assert!(facts.contains(&key) && facts.contains("unknown"), "{facts}");

    browser.click("#res-delivered").await;
    browser.type_into("#provider_ref", &reference).await;
    browser
        .type_into("#note", "found the notification in the provider's log")
        .await;
    if t.backend() == "sqlite" {
        let shot = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/review-page.png");
        browser.screenshot(&shot).await;
    }
    browser.click("#resolve").await;
    browser
        .wait_for_text("#notice", "resolved as delivered")
        .await;
    browser.wait_for_text("main", "No open items").await;
    assert_eq!(
        browser.count(&format!("#item-{item_id}")).await,
        0,
        "it left the queue"
    );
    let intent = h.intent(intent_id).await;
    assert_eq!(
        (intent.state, intent.provider_ref),
        (IntentState::Delivered, Some(reference.clone()))
    );

    browser.click("header a[href='/review/audit']").await;
    let audit = browser
        .wait_for_text("#audit", "reconciliation.resolve")
        .await;
    assert!(
        audit.contains("acme-ops")
            && audit.contains("found the notification in the provider's log"),
        "{audit}"
    );
    assert!(audit.contains(&reference), "{audit}");

    browser.click("#logout").await;
    browser.wait_for_text("h1", "Sign in").await;
    browser.goto(&format!("{review}/audit")).await;
    browser.wait_for_text("h1", "Sign in").await;
    browser.quit().await;
}

both_backends!(operator_resolves_an_unknown_outcome_in_the_browser);

/// Without Chromium the browser test is skipped, and says so where the person running the
/// suite sees it: on the terminal, not in libtest's captured output (which is thrown away
/// for a passing test). Runs this test binary again with the browser made unavailable.
#[test]
fn a_skipped_browser_test_says_so_on_the_terminal() {
    // The test's full name in this binary: the module path without the crate's name.
    let module = module_path!().split_once("::").map_or("", |(_, rest)| rest);
    let name = format!("{module}::on_sqlite::operator_resolves_an_unknown_outcome_in_the_browser");
    // The skip also goes to the skip log (a file of its own here, so this deliberate skip
    // does not land in the log `scripts/test.sh` prints).
    let dir = tempfile::tempdir().unwrap();
    let skip_log = dir.path().join("skipped.log");
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name.trim_start_matches("::"), "--exact", "--test-threads=1"])
        .env(support::webdriver::CHROMIUM_ENV, "/nonexistent/chromium")
        .env("OUTBOXD_SKIP_LOG", &skip_log)
        .env_remove("OUTBOXD_REQUIRE_BROWSER")
        .output()
        .expect("run the browser test");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("1 passed"), "the test ran: {stdout}");
    assert!(
        stderr.contains("SKIPPING the headless-browser test"),
        "the skip was silent; stderr: {stderr:?}"
    );
    let logged = std::fs::read_to_string(&skip_log).unwrap_or_default();
    assert!(
        logged.contains("operator_resolves_an_unknown_outcome_in_the_browser")
            && logged.contains("SKIPPING the headless-browser test"),
        "the skip is not in the skip log: {logged:?}"
    );
}
