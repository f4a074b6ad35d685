//! The review page over plain HTTP: sign-in cookie flags, pages without a session, the
//! CSRF field, viewers, the "already resolved" notice, escaping of stored data, and tenant
//! isolation of every page.

use outboxd::intent::IntentState;
use outboxd::NewIntent;
use reqwest::StatusCode;
use serde_json::json;

use super::page::Page;
use crate::support::admin::{unknown_intent, AdminServer, ACME_OPS, ACME_OPS_2, ACME_VIEWER};
use crate::support::harness::{Harness, NOTIFY};
use crate::support::TestDb;

async fn sign_in_sets_a_strict_http_only_cookie(t: &TestDb) {
    let server = AdminServer::start(&t.db).await;
    let anonymous = Page::anonymous(&server);
    let ok = anonymous
        .post("/review/login", &[("token", ACME_OPS)])
        .await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER);
    for flag in [
        "outboxd_session=",
        "HttpOnly",
        "SameSite=Strict",
        "Path=/review",
    ] {
        assert!(
            ok.set_cookie().contains(flag),
            "{flag} missing in {}",
            ok.set_cookie()
        );
    }
    assert!(
        !ok.set_cookie().contains(ACME_OPS),
        "the cookie does not carry the raw token text"
    );

    let bad = anonymous
        .post("/review/login", &[("token", "wrong-token-value-1234")])
        .await;
    assert_eq!(
        (bad.status, bad.set_cookie()),
        (StatusCode::UNAUTHORIZED, "")
    );
    assert!(bad.text.contains("not valid") && !bad.text.contains("wrong-token-value-1234"));
    let cross = anonymous
        .post_with(
            "/review/login",
            &[("token", ACME_OPS)],
            ("sec-fetch-site", "cross-site"),
        )
        .await;
    assert_eq!(
        (cross.status, cross.set_cookie()),
        (StatusCode::FORBIDDEN, "")
    );

    let out = Page::sign_in(&server, ACME_OPS)
        .await
        .post("/review/logout", &[])
        .await;
    assert_eq!(out.location(), "/review");
    assert!(out.set_cookie().contains("Max-Age=0"));
}

/// The session cookie is an opaque value made by the server: it is neither the token nor
/// an encoding of it, and it is no credential for the JSON API.
async fn the_session_cookie_is_not_the_token(t: &TestDb) {
    use base64::Engine as _;
    let server = AdminServer::start(&t.db).await;
    let ok = Page::anonymous(&server)
        .post("/review/login", &[("token", ACME_OPS)])
        .await;
    assert_eq!(ok.status, StatusCode::SEE_OTHER);
    let pair = ok.set_cookie().split(';').next().unwrap().to_owned();
    let value = pair.split_once('=').unwrap().1.to_owned();
    assert!(!value.is_empty(), "{pair}");
    for engine in [
        base64::engine::general_purpose::URL_SAFE_NO_PAD,
        base64::engine::general_purpose::STANDARD_NO_PAD,
    ] {
        let decoded = engine.decode(value.as_bytes()).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&decoded).contains(ACME_OPS),
            "the cookie {pair} is an encoding of the token"
        );
    }
    assert!(!value.contains(ACME_OPS));
    // The cookie signs the page in...
    let page = Page::sign_in(&server, ACME_OPS).await;
    assert!(page.get("/review").await.text.contains("acme-ops"));
    // ...but is no bearer token.
    let (status, _) = server.api(Some(&value)).get("/v1/intents").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

/// After too many failed sign-ins from one client, sign-in answers 429 (even with a valid
/// token) with a message saying when to try again.
async fn failed_sign_ins_are_throttled(t: &TestDb) {
    let server = AdminServer::start(&t.db).await;
    let anonymous = Page::anonymous(&server);
    for i in 0..10 {
        let bad = anonymous
            .post("/review/login", &[("token", &format!("guess-{i:020}"))])
            .await;
        assert_eq!(bad.status, StatusCode::UNAUTHORIZED, "guess {i}");
    }
    let throttled = anonymous
        .post("/review/login", &[("token", ACME_OPS)])
        .await;
    assert_eq!(throttled.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        throttled.text.contains("Too many failed sign-ins"),
        "{}",
        throttled.text
    );
    assert!(throttled.headers.contains_key("retry-after"));
    assert_eq!(throttled.set_cookie(), "");
}

/// `[admin] cookie_secure = true` adds `Secure` to the session cookie (TLS deployments).
async fn the_cookie_is_secure_when_configured(t: &TestDb) {
    let plain = AdminServer::start(&t.db).await;
    let ok = Page::anonymous(&plain)
        .post("/review/login", &[("token", ACME_OPS)])
        .await;
    assert!(!ok.set_cookie().contains("Secure"), "{}", ok.set_cookie());
    let secure = AdminServer::start_with(&t.db, |ctx| ctx.with_cookie_secure(true)).await;
    let ok = Page::anonymous(&secure)
        .post("/review/login", &[("token", ACME_OPS)])
        .await;
    assert!(ok.set_cookie().contains("; Secure"), "{}", ok.set_cookie());
    let out = Page::sign_in(&secure, ACME_OPS)
        .await
        .post("/review/logout", &[])
        .await;
    assert!(
        out.set_cookie().contains("; Secure"),
        "{}",
        out.set_cookie()
    );
}

async fn pages_without_a_session_ask_to_sign_in(t: &TestDb) {
    let server = AdminServer::start(&t.db).await;
    let anonymous = Page::anonymous(&server);
    let home = anonymous.get("/review").await;
    assert!(home.text.contains("name=\"token\""), "the sign-in form");
    for (name, value) in [("cache-control", "no-store"), ("x-frame-options", "DENY")] {
        assert_eq!(home.headers[name], value);
    }
    let csp = home.headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("form-action 'self'") && csp.contains("default-src 'none'"),
        "{csp}"
    );
    for path in [
        "/review/items/1",
        "/review/audit",
        "/review/queue",
        "/review/intents",
        "/review/intents/1",
        "/review/intents/bulk?op=cancel&id=1",
    ] {
        let a = anonymous.get(path).await;
        assert_eq!(
            (a.status, a.location()),
            (StatusCode::SEE_OTHER, "/review"),
            "{path}"
        );
    }
    let post = anonymous
        .post("/review/items/1/resolve", &[("note", "n")])
        .await;
    assert_eq!(post.status, StatusCode::UNAUTHORIZED);
}

fn abandon_form(csrf: &str) -> [(&str, &str); 4] {
    [
        ("csrf", csrf),
        ("resolution", "abandoned"),
        ("provider_ref", ""),
        ("note", "duplicate request"),
    ]
}

async fn resolving_needs_this_sessions_csrf_field(t: &TestDb) {
    let h = Harness::new(t).await;
    let (intent_id, item) = unknown_intent(&h, "acme", "op-form").await;
    let server = AdminServer::start(&h.db).await;
    let (alice, bob) = (
        Page::sign_in(&server, ACME_OPS).await,
        Page::sign_in(&server, ACME_OPS_2).await,
    );
    let path = format!("/review/items/{item}");
    let (alice_csrf, bob_csrf) = (alice.get(&path).await.csrf(), bob.get(&path).await.csrf());
    assert_ne!(alice_csrf, bob_csrf);
    let resolve = format!("{path}/resolve");
    for csrf in ["", "0000", bob_csrf.as_str()] {
        let a = alice.post(&resolve, &abandon_form(csrf)).await;
        assert_eq!(a.status, StatusCode::FORBIDDEN, "csrf {csrf:?}");
        assert!(a.text.contains("Reload the item"));
    }
    assert_eq!(
        h.intent(intent_id).await.state,
        IntentState::Unknown,
        "nothing changed"
    );

    let form = [
        ("csrf", alice_csrf.as_str()),
        ("resolution", "delivered"),
        ("note", "kept <text>"),
    ];
    let missing_ref = alice.post(&resolve, &form).await;
    assert_eq!(missing_ref.status, StatusCode::BAD_REQUEST);
    assert!(
        missing_ref.text.contains("provider's reference"),
        "explains the missing reference"
    );
    assert!(
        missing_ref.text.contains("kept &lt;text&gt;</textarea>"),
        "keeps what was typed, escaped"
    );
    let done = alice.post(&resolve, &abandon_form(&alice_csrf)).await;
    assert_eq!(
        (done.status, done.location().to_owned()),
        (
            StatusCode::SEE_OTHER,
            format!("/review/queue?resolved={item}")
        )
    );
    assert_eq!(h.intent(intent_id).await.state, IntentState::Abandoned);
}

async fn a_late_resolution_is_told_who_was_first(t: &TestDb) {
    let h = Harness::new(t).await;
    let (intent_id, item) = unknown_intent(&h, "acme", "op-late").await;
    let server = AdminServer::start(&h.db).await;
    let (alice, bob) = (
        Page::sign_in(&server, ACME_OPS).await,
        Page::sign_in(&server, ACME_OPS_2).await,
    );
    let path = format!("/review/items/{item}");
    let (alice_csrf, bob_csrf) = (alice.get(&path).await.csrf(), bob.get(&path).await.csrf());
    let resolve = format!("{path}/resolve");
    let bobs = [
        ("csrf", bob_csrf.as_str()),
        ("resolution", "delivered"),
        ("provider_ref", "re_bob"),
        ("note", "seen"),
    ];
    let done = bob.post(&resolve, &bobs).await;
    let queue = bob.get(done.location()).await;
    assert!(
        queue
            .text
            .contains("resolved as <strong>delivered</strong>")
            && queue.text.contains("No open items")
    );

    let late = alice.post(&resolve, &abandon_form(&alice_csrf)).await;
    assert_eq!(
        (late.status, late.location().to_owned()),
        (
            StatusCode::SEE_OTHER,
            format!("{path}?notice=already_resolved")
        )
    );
    let notice = alice.get(late.location()).await;
    assert!(
        notice
            .text
            .contains("Someone else resolved this item first"),
        "{}",
        notice.text
    );
    assert!(notice
        .text
        .contains("<strong>delivered</strong> by acme-ops-2"));
    assert!(
        !notice.text.contains("name=\"csrf\""),
        "no form on a resolved item"
    );
    assert_eq!(
        h.intent(intent_id).await.provider_ref.as_deref(),
        Some("re_bob")
    );
}

async fn viewers_see_no_form_and_cannot_post(t: &TestDb) {
    let h = Harness::new(t).await;
    let (intent_id, item) = unknown_intent(&h, "acme", "op-viewer").await;
    let server = AdminServer::start(&h.db).await;
    let viewer = Page::sign_in(&server, ACME_VIEWER).await;
    let page = viewer.get(&format!("/review/items/{item}")).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.text.contains("viewer role") && !page.text.contains("id=\"resolve\""));
    let operator = Page::sign_in(&server, ACME_OPS).await;
    let operator_csrf = operator.get(&format!("/review/items/{item}")).await.csrf();
    let refused = viewer
        .post(
            &format!("/review/items/{item}/resolve"),
            &abandon_form(&operator_csrf),
        )
        .await;
    assert_eq!(
        refused.status,
        StatusCode::FORBIDDEN,
        "another session's csrf does not fit"
    );
    assert_eq!(h.intent(intent_id).await.state, IntentState::Unknown);
}

async fn stored_data_is_escaped(t: &TestDb) {
    let h = Harness::new(t).await;
    let evil = "<script>alert(1)</script>";
    let (_, item) = unknown_intent(&h, "acme", evil).await;
    h.enqueue(NewIntent::new(
        "acme",
        "op-payload",
        NOTIFY,
        json!({"x": "<img src=x onerror=alert(2)>"}),
    ))
    .await;
    let server = AdminServer::start(&h.db).await;
    let page = Page::sign_in(&server, ACME_OPS).await;
    let queue = page.get("/review/queue").await;
    assert!(
        queue.text.contains("&lt;script&gt;alert(1)&lt;/script&gt;") && !queue.text.contains(evil)
    );
    let detail = page.get(&format!("/review/items/{item}")).await;
    assert!(!detail.text.contains(evil) && detail.text.contains("&lt;script&gt;"));
    let note = "<b onmouseover=x>why</b>";
    let form = [
        ("csrf", detail.csrf()),
        ("resolution", "abandoned".into()),
        ("note", note.into()),
    ];
    let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
    assert_eq!(
        page.post(&format!("/review/items/{item}/resolve"), &form)
            .await
            .status,
        StatusCode::SEE_OTHER
    );
    let audit = page.get("/review/audit").await;
    assert!(
        audit.text.contains("&lt;b onmouseover=x&gt;why&lt;/b&gt;") && !audit.text.contains(note)
    );
}

async fn other_tenants_are_invisible_on_every_page(t: &TestDb) {
    let h = Harness::new(t).await;
    let (_, item) = unknown_intent(&h, "acme", "acme-op").await;
    let (globex_intent, globex_item) = unknown_intent(&h, "globex", "globex-op").await;
    let server = AdminServer::start(&h.db).await;
    let globex = Page::sign_in(&server, crate::support::admin::GLOBEX_OPS).await;
    let globex_csrf = globex
        .get(&format!("/review/items/{globex_item}"))
        .await
        .csrf();
    let globex_form = [
        ("csrf", globex_csrf.as_str()),
        ("resolution", "abandoned"),
        ("note", "globex note"),
    ];
    globex
        .post(
            &format!("/review/items/{globex_item}/resolve"),
            &globex_form,
        )
        .await;
    // globex's item is resolved now; reopen the question with a fresh one for the write test.
    let (fresh_intent, fresh_item) = unknown_intent(&h, "globex", "globex-op-2").await;

    let page = Page::sign_in(&server, ACME_OPS).await;
    // acme resolves one item of its own, so its audit log has an entry to show.
    let (audited_intent, audited_item) = unknown_intent(&h, "acme", "acme-op-audited").await;
    let audited_csrf = page
        .get(&format!("/review/items/{audited_item}"))
        .await
        .csrf();
    let resolved = page
        .post(
            &format!("/review/items/{audited_item}/resolve"),
            &abandon_form(&audited_csrf),
        )
        .await;
    assert_eq!(resolved.status, StatusCode::SEE_OTHER);
    // Each page is the real page with acme's own rows (an error page would hide globex too).
    let queue = page.get("/review/queue").await;
    assert_eq!(queue.status, StatusCode::OK);
    assert!(
        queue.text.contains("<h1>Reconciliation queue</h1>")
            && queue.text.contains(&format!("/review/items/{item}")),
        "the queue lists acme's item: {}",
        queue.text
    );
    assert!(!queue.text.contains("globex"), "the queue hides globex");
    let audit = page.get("/review/audit").await;
    assert_eq!(audit.status, StatusCode::OK);
    assert!(
        audit.text.contains("<h1>Audit log</h1>")
            && audit.text.contains(&format!("<td>#{audited_intent}</td>"))
            && audit.text.contains("<td>acme</td>"),
        "the audit log shows acme's resolution: {}",
        audit.text
    );
    assert!(!audit.text.contains("globex"), "the audit log hides globex");
    let missing = page.get("/review/items/999999").await;
    for id in [globex_item, fresh_item] {
        let foreign = page.get(&format!("/review/items/{id}")).await;
        assert_eq!(
            (foreign.status, &foreign.text),
            (StatusCode::NOT_FOUND, &missing.text),
            "like a missing item"
        );
    }
    let csrf = page.get(&format!("/review/items/{item}")).await.csrf();
    let attempt = page
        .post(
            &format!("/review/items/{fresh_item}/resolve"),
            &abandon_form(&csrf),
        )
        .await;
    assert_eq!(attempt.status, StatusCode::NOT_FOUND);
    assert_eq!(h.intent(fresh_intent).await.state, IntentState::Unknown);
    assert_eq!(h.intent(globex_intent).await.state, IntentState::Abandoned);
    let flash = page
        .get(&format!("/review/queue?resolved={globex_item}"))
        .await;
    assert_eq!(flash.status, StatusCode::OK);
    assert!(
        flash.text.contains("<h1>Reconciliation queue</h1>"),
        "{}",
        flash.text
    );
    assert!(
        !flash.text.contains("globex"),
        "no notice about another tenant's item"
    );
}

/// A database failure behind a page: 500, and the page names the request id to look up in
/// the daemon's log (the same id as the response's `x-request-id`).
async fn an_internal_error_page_names_its_request_id(t: &TestDb) {
    let server = AdminServer::start(&t.db).await;
    let page = Page::sign_in(&server, ACME_OPS).await;
    t.db.close().await;
    let failed = page.get("/review/queue").await;
    assert_eq!(
        failed.status,
        StatusCode::INTERNAL_SERVER_ERROR,
        "{}",
        failed.text
    );
    let id = failed
        .headers
        .get("x-request-id")
        .expect("x-request-id on the response")
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        failed.text.contains(&format!("request id {id}")),
        "the page names request id {id}: {}",
        failed.text
    );
}

crate::both_backends!(
    sign_in_sets_a_strict_http_only_cookie,
    the_session_cookie_is_not_the_token,
    failed_sign_ins_are_throttled,
    the_cookie_is_secure_when_configured,
    pages_without_a_session_ask_to_sign_in,
    resolving_needs_this_sessions_csrf_field,
    a_late_resolution_is_told_who_was_first,
    viewers_see_no_form_and_cannot_post,
    stored_data_is_escaped,
    other_tenants_are_invisible_on_every_page,
    an_internal_error_page_names_its_request_id
);
