//! The console over plain HTTP: filters, search (operation id, stored and requested
//! idempotency key) and keyset pages; why an intent waits; cancel from a dry run; the
//! not_idempotent confirmation (only where a resend may act twice); viewers; and tenant
//! isolation of every page, search and bulk change.

use outboxd::intent::IntentState;
use outboxd::store::ProviderStateRow;
use outboxd::NewIntent;
use reqwest::StatusCode;
use serde_json::json;

use super::failed_intent;
use super::page::Page;
use super::resend::{apply_fields, post_fields};
use crate::support::admin::{unknown_intent, AdminServer, ACME_OPS, ACME_VIEWER, GLOBEX_OPS};
use crate::support::harness::{scalar, Harness, NOTIFY, REFUND};
use crate::support::TestDb;

/// An action no dispatcher has configured: its intents stay pending.
const IDLE: &str = "not_configured_here";

fn rows(html: &str) -> usize {
    html.matches("<tr id=\"intent-").count()
}

async fn filters_search_and_pages_work(t: &TestDb) {
    let h = Harness::new(t).await;
    for n in 0..52 {
        h.enqueue(NewIntent::new(
            "acme",
            format!("bulk-{n:02}"),
            IDLE,
            json!({"n": n}),
        ))
        .await;
    }
    let mut keyed = NewIntent::new("acme", "refund-7", IDLE, json!({"n": 7}));
    keyed.idempotency_key = Some("client-key-7".into());
    let keyed = h.enqueue(keyed).await;
    assert!(
        keyed.idempotency_key.starts_with("obx2_"),
        "{}",
        keyed.idempotency_key
    );
    let failed = failed_intent(&h, "acme", "refund-failed", REFUND).await;
    let server = AdminServer::start(&h.db).await;
    let page = Page::sign_in(&server, ACME_OPS).await;

    let first = page.get("/review/intents").await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(rows(&first.text), 50, "one page");
    let marker = "id=\"next\" href=\"";
    let start = first.text.find(marker).expect("a next link") + marker.len();
    let next = first.text[start..]
        .split('"')
        .next()
        .unwrap()
        .replace("&amp;", "&");
    let second = page.get(&next).await;
    assert_eq!(rows(&second.text), 4, "the rest: {next}");
    assert!(second.text.contains("bulk-00") && !second.text.contains("bulk-51"));

    let by_state = page.get("/review/intents?state=failed").await;
    assert_eq!(rows(&by_state.text), 1);
    assert!(by_state.text.contains(&format!("intent-{failed}")));
    let by_action = page.get(&format!("/review/intents?action={REFUND}")).await;
    assert_eq!(rows(&by_action.text), 1);
    for q in ["refund-7", "client-key-7", keyed.idempotency_key.as_str()] {
        let found = page.get(&format!("/review/intents?q={q}")).await;
        assert_eq!(rows(&found.text), 1, "q={q}");
        assert!(
            found.text.contains(&format!("intent-{}", keyed.intent_id)),
            "q={q}"
        );
    }
    let later = (chrono::Utc::now() + chrono::Duration::hours(1)).format("%Y-%m-%dT%H:%M");
    assert_eq!(
        rows(
            &page
                .get(&format!("/review/intents?from={later}"))
                .await
                .text
        ),
        0
    );
    assert_eq!(
        rows(
            &page
                .get(&format!("/review/intents?to={later}&state=failed"))
                .await
                .text
        ),
        1
    );
    let bad = page.get("/review/intents?from=yesterday").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(bad.text.contains("invalid from"), "{}", bad.text);
}

async fn the_intent_page_says_why_it_waits(t: &TestDb) {
    let h = Harness::new(t).await;
    let mut first = NewIntent::new("acme", "ordered-1", IDLE, json!({}));
    first.ordering_key = Some("customer-9".into());
    let first = h.enqueue(first).await;
    let mut second = NewIntent::new("acme", "ordered-2", IDLE, json!({}));
    second.ordering_key = Some("customer-9".into());
    second.not_before = Some(chrono::Utc::now() + chrono::Duration::hours(3));
    let second = h.enqueue(second).await;
    let server = AdminServer::start(&h.db).await;
    let page = Page::sign_in(&server, ACME_OPS).await;
    let shown = page
        .get(&format!("/review/intents/{}", second.intent_id))
        .await;
    assert_eq!(shown.status, StatusCode::OK);
    for code in ["why-action-not-configured", "why-blocked", "why-not-due"] {
        assert!(shown.text.contains(code), "{code}: {}", shown.text);
    }
    assert!(shown
        .text
        .contains(&format!("Blocked by intent #{}", first.intent_id)));
    let head = page
        .get(&format!("/review/intents/{}", first.intent_id))
        .await;
    assert!(head.text.contains("why-action-not-configured") && !head.text.contains("why-blocked"));
}

async fn cancel_goes_through_a_dry_run(t: &TestDb) {
    let h = Harness::new(t).await;
    let pending = h
        .enqueue(NewIntent::new("acme", "to-cancel", IDLE, json!({})))
        .await;
    let failed = failed_intent(&h, "acme", "not-cancellable", REFUND).await;
    let server = AdminServer::start(&h.db).await;
    let page = Page::sign_in(&server, ACME_OPS).await;
    let path = format!(
        "/review/intents/bulk?op=cancel&id={}&id={failed}",
        pending.intent_id
    );
    let dry = page.get(&path).await;
    assert_eq!(dry.status, StatusCode::OK);
    assert!(
        dry.text
            .contains("<strong>1</strong> intent(s) will change"),
        "{}",
        dry.text
    );
    assert!(dry.text.contains("only a pending intent can be cancelled"));
    let fields = apply_fields(&dry);
    let id = pending.intent_id.to_string();
    let no_note = post_fields(&page, &fields, &[]).await;
    assert_eq!(no_note.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        h.intent(pending.intent_id).await.state,
        IntentState::Pending
    );
    let done = post_fields(&page, &fields, &[("note", "customer withdrew")]).await;
    assert_eq!(done.status, StatusCode::OK);
    assert!(
        done.text.contains("1 of 1 intent(s) changed"),
        "{}",
        done.text
    );
    assert_eq!(
        h.intent(pending.intent_id).await.state,
        IntentState::Cancelled
    );
    let audit = page.get(&format!("/review/audit?intent={id}")).await;
    assert!(audit.text.contains("intent.cancel") && audit.text.contains("customer withdrew"));
    let other = page.get("/review/audit?actor=nobody").await;
    assert!(other.text.contains("No entries."));
}

async fn not_idempotent_redispatch_needs_its_own_confirmation(t: &TestDb) {
    let h = Harness::new(t).await;
    let (lost, _) = unknown_intent(&h, "acme", "notify-lost").await;
    // Refused with a 400: the provider did not act, so sending it again cannot act twice.
    let refused_once = failed_intent(&h, "acme", "notify-refused", NOTIFY).await;
    let server = AdminServer::start(&h.db).await;
    let page = Page::sign_in(&server, ACME_OPS).await;
    let dry = page
        .get(&format!(
            "/review/intents/bulk?op=redispatch&id={lost}&id={refused_once}"
        ))
        .await;
    let warning = dry
        .text
        .split("id=\"twice\"")
        .nth(1)
        .and_then(|rest| rest.split("</ul>").next())
        .unwrap_or_else(|| panic!("no warning: {}", dry.text));
    assert!(
        warning.contains(&format!("#{lost} ")) && warning.contains("not_idempotent"),
        "{warning}"
    );
    assert!(!warning.contains(&format!("#{refused_once} ")), "{warning}");
    assert!(warning.contains("may act twice"), "{warning}");
    let fields = apply_fields(&dry);
    let refused = post_fields(&page, &fields, &[("note", "resend")]).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert!(refused.text.contains("Tick the confirmation"));
    assert_eq!(h.intent(lost).await.state, IntentState::Unknown);
    assert_eq!(h.intent(refused_once).await.state, IntentState::Failed);
    let confirmed = [("note", "resend"), ("confirm_may_act_twice", "yes")];
    let done = post_fields(&page, &fields, &confirmed).await;
    assert!(done.text.contains("2 of 2"), "{}", done.text);
    assert_eq!(h.intent(lost).await.state, IntentState::Pending);
    assert_eq!(h.intent(refused_once).await.state, IntentState::Pending);
    let audit = page.get(&format!("/review/audit?intent={lost}")).await;
    assert!(
        audit.text.contains("confirmed_may_act_twice"),
        "{}",
        audit.text
    );
}

async fn viewers_read_every_page_and_cannot_post(t: &TestDb) {
    let h = Harness::new(t).await;
    let failed = failed_intent(&h, "acme", "viewer-op", REFUND).await;
    let server = AdminServer::start(&h.db).await;
    let viewer = Page::sign_in(&server, ACME_VIEWER).await;
    for path in [
        "/review",
        "/review/queue",
        "/review/intents",
        "/review/audit",
    ] {
        let a = viewer.get(path).await;
        assert_eq!(a.status, StatusCode::OK, "{path}");
        assert!(
            !a.text.contains("name=\"csrf\"")
                && !a.text.contains("method=\"post\" action=\"/review/intents"),
            "{path}"
        );
    }
    let list = viewer.get("/review/intents").await;
    assert!(list.text.contains("viewer-op") && !list.text.contains("id=\"bulk\""));
    let one = viewer.get(&format!("/review/intents/{failed}")).await;
    assert!(one.text.contains("viewer-op") && !one.text.contains("id=\"redispatch\""));
    let dry = viewer
        .get(&format!("/review/intents/bulk?op=redispatch&id={failed}"))
        .await;
    assert_eq!(dry.status, StatusCode::FORBIDDEN);
    let operator = Page::sign_in(&server, ACME_OPS).await;
    let operator_csrf = operator
        .get(&format!("/review/intents/bulk?op=redispatch&id={failed}"))
        .await
        .csrf();
    let id = failed.to_string();
    for csrf in ["", operator_csrf.as_str()] {
        let form = [
            ("csrf", csrf),
            ("op", "redispatch"),
            ("id", &id),
            ("note", "n"),
        ];
        let refused = viewer.post("/review/intents/bulk", &form).await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "csrf {csrf:?}");
    }
    assert_eq!(h.intent(failed).await.state, IntentState::Failed);
}

async fn another_tenant_never_shows(t: &TestDb) {
    let h = Harness::new(t).await;
    failed_intent(&h, "acme", "acme-op", REFUND).await;
    let theirs = failed_intent(&h, "globex", "globex-op", REFUND).await;
    let globex_key = h.intent(theirs).await.idempotency_key;
    h.enqueue(NewIntent::new(
        "globex",
        "globex-idle",
        "globex_only_action",
        json!({}),
    ))
    .await;
    let server = AdminServer::start(&h.db).await;
    let page = Page::sign_in(&server, ACME_OPS).await;
    let dashboard = page.get("/review").await;
    assert!(dashboard.text.contains("<h1>Dashboard</h1>") && dashboard.text.contains(REFUND));
    assert!(!dashboard.text.contains("globex"), "{}", dashboard.text);
    for path in ["/review/intents", "/review/audit"] {
        let a = page.get(path).await;
        assert_eq!(a.status, StatusCode::OK, "{path}");
        assert!(!a.text.contains("globex"), "{path}: {}", a.text);
    }
    // The search box echoes what was typed; no row of globex's may come back.
    for path in [
        "/review/intents?tenant=globex".to_owned(),
        "/review/intents?q=globex-op".to_owned(),
        format!("/review/intents?q={globex_key}"),
    ] {
        let a = page.get(&path).await;
        assert_eq!((a.status, rows(&a.text)), (StatusCode::OK, 0), "{path}");
        assert!(a.text.contains("No intents match."), "{path}");
    }
    let missing = page.get("/review/intents/999999").await;
    let foreign = page.get(&format!("/review/intents/{theirs}")).await;
    assert_eq!(
        (foreign.status, &foreign.text),
        (StatusCode::NOT_FOUND, &missing.text)
    );
    let dry = page
        .get(&format!("/review/intents/bulk?op=redispatch&id={theirs}"))
        .await;
    assert!(
        dry.text.contains("not found") && !dry.text.contains("globex"),
        "{}",
        dry.text
    );
    assert!(dry.text.contains("Nothing to change"));
    let csrf = page
        .get("/review/intents/bulk?op=redispatch&state=failed")
        .await
        .csrf();
    let id = theirs.to_string();
    let form = [
        ("csrf", csrf.as_str()),
        ("op", "redispatch"),
        ("id", &id),
        ("note", "n"),
        ("confirm_may_act_twice", "yes"),
    ];
    let forced = page.post("/review/intents/bulk", &form).await;
    assert_eq!(forced.status, StatusCode::BAD_REQUEST, "{}", forced.text);
    assert!(!forced.text.contains("globex"), "{}", forced.text);
    assert_eq!(h.intent(theirs).await.state, IntentState::Failed);
    let globex = Page::sign_in(&server, GLOBEX_OPS).await;
    assert!(globex
        .get("/review/intents")
        .await
        .text
        .contains("globex-op"));
    let sql = "SELECT count(*) FROM outbox_audit_log WHERE tenant = 'globex'";
    assert_eq!(scalar(&h.db, sql).await, 0);
}

async fn the_dashboard_shows_each_daemons_provider_state(t: &TestDb) {
    let h = Harness::new(t).await;
    let server = AdminServer::start(&h.db).await;
    let page = Page::sign_in(&server, ACME_VIEWER).await;
    let empty = page.get("/review").await;
    assert_eq!(empty.status, StatusCode::OK);
    assert!(
        empty.text.contains("id=\"providers-none\""),
        "{}",
        empty.text
    );
    let now = chrono::Utc::now();
    let row = |owner: &str, breaker: &str, age_secs: i64| ProviderStateRow {
        owner: owner.to_owned(),
        provider: "payments".to_owned(),
        in_flight: 7,
        max_in_flight: 32,
        send_window: (owner == "replica-1").then_some(12),
        rate_limited_waits: 4,
        breaker: breaker.to_owned(),
        breaker_open_until: (breaker == "open").then(|| now + chrono::Duration::seconds(20)),
        paused_until: None,
        updated_at: now - chrono::Duration::seconds(age_secs),
    };
    let store = h.db.store();
    let never = now - chrono::Duration::hours(1);
    store
        .publish_provider_states("replica-1", &[row("replica-1", "open", 0)], never)
        .await
        .unwrap();
    store
        .publish_provider_states("replica-2", &[row("replica-2", "closed", 120)], never)
        .await
        .unwrap();
    let shown = page.get("/review").await;
    assert_eq!(shown.status, StatusCode::OK);
    let live = shown
        .text
        .split("id=\"provider-payments-replica-1\"")
        .nth(1)
        .and_then(|rest| rest.split("</tr>").next())
        .unwrap_or_else(|| panic!("no row for replica-1: {}", shown.text));
    assert!(
        live.contains("7 / 32") && live.contains("12 / 32") && live.contains("open until"),
        "{live}"
    );
    assert!(!live.contains("STALE"), "{live}");
    let dead = shown
        .text
        .split("id=\"provider-payments-replica-2\"")
        .nth(1)
        .and_then(|rest| rest.split("</tr>").next())
        .unwrap_or_else(|| panic!("no row for replica-2: {}", shown.text));
    assert!(dead.contains("closed") && dead.contains("STALE"), "{dead}");
    assert!(
        dead.contains("not published"),
        "an older release's row: {dead}"
    );
}

crate::both_backends!(
    the_dashboard_shows_each_daemons_provider_state,
    filters_search_and_pages_work,
    the_intent_page_says_why_it_waits,
    cancel_goes_through_a_dry_run,
    not_idempotent_redispatch_needs_its_own_confirmation,
    viewers_read_every_page_and_cannot_post,
    another_tenant_never_shows
);
