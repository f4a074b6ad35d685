//! Hostile values on the review page's own pages: a tenant, operation id, reason, probe
//! finding, attempt error and provider reference, actor (a token's name), provider
//! reference and note typed into the form, each holding markup, quotes and `&`, come out
//! escaped on the queue, the item page (before and after a refused and an accepted
//! resolution), the queue's notice, the audit log with its filter, and an error page:
//! in element text and in attribute values alike.

use reqwest::StatusCode;

use super::page::Page;
use crate::support::admin::{test_tokens, unknown_intent, AdminServer};
use crate::support::harness::{exec, Harness};
use crate::support::TestDb;
use outboxd::config::{AdminToken, Role, Secret};

/// Markup, both quotes and an ampersand.
const HOSTILE: &str = "<script>alert(1)</script> \"q\" & 'a'";
/// [`HOSTILE`] escaped, up to the single quote (which needs no escaping in text or in a
/// double-quoted attribute).
const ESCAPED: &str = "&lt;script&gt;alert(1)&lt;/script&gt; &quot;q&quot; &amp; ";
/// The token of an operator whose name is [`HOSTILE`].
const HOSTILE_OPS: &str = "hostile-operator-token-000000009";

/// `HOSTILE` prefixed, so each field's value can be told apart on a page.
fn hostile(field: &str) -> String {
    format!("{field}:{HOSTILE}")
}

fn escaped(field: &str) -> String {
    format!("{field}:{ESCAPED}")
}

/// The page holds no raw hostile markup or quote, and holds `field`'s value escaped.
#[track_caller]
fn shows_escaped(page: &str, fields: &[&str]) {
    assert!(!page.contains("<script>"), "raw markup on the page: {page}");
    assert!(!page.contains("\"q\""), "a raw quote on the page: {page}");
    assert!(!page.contains(" & "), "a raw ampersand on the page: {page}");
    for field in fields {
        assert!(
            page.contains(&escaped(field)),
            "{field} not shown escaped: {page}"
        );
    }
}

/// `field`'s value escaped as the value of a double-quoted attribute.
#[track_caller]
fn in_attribute(page: &str, attribute: &str, field: &str) {
    let wanted = format!("{attribute}=\"{}", escaped(field));
    assert!(page.contains(&wanted), "no {wanted} on the page: {page}");
}

async fn hostile_values_are_escaped_on_every_page(t: &TestDb) {
    let h = Harness::new(t).await;
    let (tenant, operation) = (hostile("tenant"), hostile("operation"));
    let (_, item) = unknown_intent(&h, &tenant, &operation).await;
    let quoted = |field: &str| hostile(field).replace('\'', "''");
    let stored = format!(
        "UPDATE outbox_reconciliation_items SET reason = '{}', probe_finding = '{}'",
        quoted("reason"),
        quoted("probe")
    );
    exec(&h.db, &stored, &stored).await;
    let attempt = format!(
        "UPDATE outbox_attempts SET error = '{}', provider_ref = '{}'",
        quoted("error"),
        quoted("attempt-ref")
    );
    exec(&h.db, &attempt, &attempt).await;
    let server = AdminServer::start_with(&h.db, |mut ctx| {
        let mut tokens = test_tokens();
        tokens.push(AdminToken {
            name: hostile("actor"),
            token: Some(Secret::new(HOSTILE_OPS)),
            token_env: None,
            token_file: None,
            role: Role::Operator,
            tenants: vec!["*".to_owned()],
        });
        ctx.tokens = tokens.into();
        ctx
    })
    .await;
    let page = Page::sign_in(&server, HOSTILE_OPS).await;

    let queue = page.get("/review/queue").await;
    assert_eq!(queue.status, StatusCode::OK);
    shows_escaped(
        &queue.text,
        &["actor", "tenant", "operation", "reason", "probe"],
    );

    let path = format!("/review/items/{item}");
    let detail = page.get(&path).await;
    let facts = [
        "actor",
        "tenant",
        "operation",
        "reason",
        "probe",
        "error",
        "attempt-ref",
    ];
    shows_escaped(&detail.text, &facts);

    let (reference, note) = (hostile("provider-ref"), hostile("note"));
    let refused = [
        ("csrf", detail.csrf()),
        ("resolution", "delivered".to_owned()),
        ("provider_ref", reference.clone()),
        ("note", String::new()),
    ];
    let refused: Vec<(&str, &str)> = refused.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let typed = page.post(&format!("{path}/resolve"), &refused).await;
    assert_eq!(typed.status, StatusCode::BAD_REQUEST, "{}", typed.text);
    shows_escaped(&typed.text, &["provider-ref"]);
    in_attribute(&typed.text, "value", "provider-ref");

    let accepted = [
        ("csrf", detail.csrf()),
        ("resolution", "delivered".to_owned()),
        ("provider_ref", reference.clone()),
        ("note", note.clone()),
    ];
    let accepted: Vec<(&str, &str)> = accepted.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let done = page.post(&format!("{path}/resolve"), &accepted).await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.text);
    let flash = page.get(done.location()).await;
    assert!(flash
        .text
        .contains("resolved as <strong>delivered</strong>"));
    shows_escaped(&flash.text, &["tenant", "operation"]);

    let resolved = page.get(&path).await;
    shows_escaped(&resolved.text, &["actor", "note", "provider-ref"]);
    assert!(resolved.text.contains(&format!(
        "<strong>delivered</strong> by {}",
        escaped("actor")
    )));

    let filter = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("actor", &hostile("actor"))
        .append_pair("action", "reconciliation.resolve")
        .finish();
    let audit = page.get(&format!("/review/audit?{filter}")).await;
    assert_eq!(audit.status, StatusCode::OK);
    assert!(audit.text.contains("id=\"audit-"), "{}", audit.text);
    shows_escaped(&audit.text, &["actor", "tenant", "note"]);
    in_attribute(&audit.text, "value", "actor");

    let error = page.get("/review/audit?intent=not-a-number").await;
    assert_eq!(error.status, StatusCode::BAD_REQUEST);
    shows_escaped(&error.text, &["actor"]);
}

crate::both_backends!(hostile_values_are_escaped_on_every_page);
