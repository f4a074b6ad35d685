//! "May this resend act twice?" on every path a person redispatches through: the bulk
//! page, the item page, `POST /v1/reconciliation/{id}/resolve`,
//! `POST /v1/reconciliation/redispatch` and `outboxd reconcile resolve`. Where the answer
//! is yes (a `not_idempotent` action after an ambiguous attempt, or a keyed one whose key
//! the provider may have forgotten) the change needs an explicit confirmation that shows
//! the reason; without it the answer is 400 naming the field, and nothing changes.

use std::time::Duration;

use outboxd::fake_provider::{Fault, FaultRule, Matcher};
use outboxd::intent::{IntentId, IntentState};
use outboxd::NewIntent;
use reqwest::StatusCode;
use serde_json::json;

use super::page::{Answer, Page};
use crate::support::admin::{unknown_intent, AdminServer, ACME_OPS};
use crate::support::cli::Cli;
use crate::support::harness::{exec, scalar, Harness, REFUND};
use crate::support::TestDb;
use outboxd::store::ReconciliationItemId;

/// The hidden fields of the dry run's apply form, in page order.
pub fn apply_fields(dry: &Answer) -> Vec<(String, String)> {
    let form = dry
        .text
        .split("id=\"apply\"")
        .nth(1)
        .and_then(|rest| rest.split("</form>").next())
        .unwrap_or_else(|| panic!("no apply form: {}", dry.text));
    let mut fields = Vec::new();
    for input in form.split("<input type=\"hidden\" ").skip(1) {
        let attr = |name: &str| {
            let marker = format!("{name}=\"");
            let start = input.find(&marker).map(|s| s + marker.len())?;
            let end = input[start..].find('"')?;
            Some(input[start..start + end].to_owned())
        };
        if let (Some(name), Some(value)) = (attr("name"), attr("value")) {
            fields.push((name, value));
        }
    }
    fields
}

/// Posts `fields` (plus `extra`) to the bulk endpoint.
pub async fn post_fields(
    page: &Page,
    fields: &[(String, String)],
    extra: &[(&str, &str)],
) -> Answer {
    let mut form: Vec<(&str, &str)> = fields
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    form.extend_from_slice(extra);
    page.post("/review/intents/bulk", &form).await
}

/// Audit entries about `intent`.
pub async fn audit_entries(h: &Harness, intent: IntentId) -> i64 {
    let sql = format!("SELECT count(*) FROM outbox_audit_log WHERE intent_id = {intent}");
    scalar(&h.db, &sql).await
}

/// A keyed intent whose response was lost and whose key the provider may have forgotten
/// (its first request was two days ago; the key is kept 24 h): `unknown`, in
/// reconciliation. Returns `(intent_id, item_id)`.
pub async fn keyed_unknown_past_its_key(
    h: &Harness,
    tenant: &str,
    op: &str,
) -> (IntentId, ReconciliationItemId) {
    let r = h
        .enqueue(NewIntent::new(tenant, op, REFUND, json!({"op": op})))
        .await;
    h.provider.push_fault(FaultRule {
        matcher: Matcher::Key(r.idempotency_key.clone()),
        fault: Fault::LoseResponseAfterApply,
        times: 1,
    });
    h.dispatcher.drain().await.unwrap();
    assert_eq!(h.intent(r.intent_id).await.state, IntentState::Unknown);
    let id = r.intent_id;
    exec(
        &h.db,
        &format!("UPDATE outbox_intents SET first_sent_at = first_sent_at - 172800000 WHERE id = {id}"),
        &format!("UPDATE outbox_intents SET first_sent_at = first_sent_at - interval '2 days' WHERE id = {id}"),
    )
    .await;
    let items = h.store.reconciliation_for_intent(id).await.unwrap();
    (id, items[0].id)
}

async fn open_items(h: &Harness, intent: IntentId) -> usize {
    let items = h.store.reconciliation_for_intent(intent).await.unwrap();
    items.iter().filter(|i| i.resolved_at.is_none()).count()
}

async fn bulk_redispatch_past_the_key_window_needs_confirmation(t: &TestDb) {
    // The dispatcher's provider forgets keys at once, so the lost response is not retried.
    let h = Harness::with_retention(t, Duration::from_millis(1)).await;
    let (intent, _) = keyed_unknown_past_its_key(&h, "acme", "refund-lost").await;
    let server = AdminServer::start(&h.db).await;
    let page = Page::sign_in(&server, ACME_OPS).await;
    let dry = page
        .get(&format!("/review/intents/bulk?op=redispatch&id={intent}"))
        .await;
    assert!(
        dry.text.contains("id=\"twice\"")
            && dry
                .text
                .contains("the provider may have forgotten the key since"),
        "{}",
        dry.text
    );
    let fields = apply_fields(&dry);
    let refused = post_fields(&page, &fields, &[("note", "resend")]).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.text);
    assert!(
        refused.text.contains("may have forgotten the key since"),
        "{}",
        refused.text
    );
    assert_eq!(h.intent(intent).await.state, IntentState::Unknown);
    assert_eq!(open_items(&h, intent).await, 1);
    assert_eq!(audit_entries(&h, intent).await, 0);

    let confirm = [("note", "resend"), ("confirm_may_act_twice", "yes")];
    let done = post_fields(&page, &fields, &confirm).await;
    assert!(done.text.contains("1 of 1"), "{}", done.text);
    assert_eq!(h.intent(intent).await.state, IntentState::Pending);
    assert_eq!(audit_entries(&h, intent).await, 1);
    h.dispatcher.drain().await.unwrap();
    assert_eq!(h.intent(intent).await.state, IntentState::Delivered);
}

async fn the_item_page_asks_before_a_resend_that_may_act_twice(t: &TestDb) {
    let h = Harness::new(t).await;
    let (intent, item) = unknown_intent(&h, "acme", "notify-lost").await;
    let server = AdminServer::start(&h.db).await;
    let page = Page::sign_in(&server, ACME_OPS).await;
    let shown = page.get(&format!("/review/items/{item}")).await;
    assert!(
        shown.text.contains("name=\"confirm_may_act_twice\"")
            && shown.text.contains("may act twice"),
        "{}",
        shown.text
    );
    let csrf = shown.csrf();
    let path = format!("/review/items/{item}/resolve");
    let form = [
        ("csrf", csrf.as_str()),
        ("resolution", "redispatch"),
        ("note", "customer never got it"),
    ];
    let refused = page.post(&path, &form).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.text);
    assert!(refused.text.contains("may act twice"), "{}", refused.text);
    assert_eq!(h.intent(intent).await.state, IntentState::Unknown);
    assert_eq!(audit_entries(&h, intent).await, 0);
    let mut confirmed = form.to_vec();
    confirmed.push(("confirm_may_act_twice", "yes"));
    let done = page.post(&path, &confirmed).await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.text);
    assert_eq!(h.intent(intent).await.state, IntentState::Pending);
    assert_eq!(audit_entries(&h, intent).await, 1);
}

async fn the_api_asks_before_a_resend_that_may_act_twice(t: &TestDb) {
    let h = Harness::new(t).await;
    let (one, one_item) = unknown_intent(&h, "acme", "notify-one").await;
    let (bulk, bulk_item) = unknown_intent(&h, "acme", "notify-bulk").await;
    let server = AdminServer::start(&h.db).await;
    let api = server.api(Some(ACME_OPS));

    let path = format!("/v1/reconciliation/{one_item}/resolve");
    let body = json!({"resolution": "redispatch", "note": "never arrived"});
    let (status, refused) = api.post(&path, body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(
        refused["error"]["field"], "confirm_may_act_twice",
        "{refused}"
    );
    assert!(refused["error"]["message"]
        .as_str()
        .unwrap()
        .contains("may act twice"));
    assert_eq!(h.intent(one).await.state, IntentState::Unknown);
    assert_eq!(audit_entries(&h, one).await, 0);
    let body = json!({"resolution": "redispatch", "note": "never arrived",
        "confirm_may_act_twice": true});
    let (status, done) = api.post(&path, body).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(h.intent(one).await.state, IntentState::Pending);

    let run = json!({"dry_run": false, "note": "resend", "item_ids": [bulk_item]});
    let (status, refused) = api.post("/v1/reconciliation/redispatch", run).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(
        refused["error"]["field"], "confirm_may_act_twice",
        "{refused}"
    );
    assert_eq!(h.intent(bulk).await.state, IntentState::Unknown);
    assert_eq!(audit_entries(&h, bulk).await, 0);
    let sql =
        "SELECT count(*) FROM outbox_audit_log WHERE action = 'reconciliation.bulk_redispatch'";
    assert_eq!(scalar(&h.db, sql).await, 0);
    let run = json!({"dry_run": false, "note": "resend", "item_ids": [bulk_item],
        "confirm_may_act_twice": true});
    let (status, done) = api.post("/v1/reconciliation/redispatch", run).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(done["summary"], json!({"redispatched": 1}), "{done}");
    assert_eq!(h.intent(bulk).await.state, IntentState::Pending);
}

async fn the_cli_asks_before_a_resend_that_may_act_twice(t: &TestDb) {
    let h = Harness::new(t).await;
    let cli = Cli::new(t);
    let (intent, item) = unknown_intent(&h, "acme", "notify-cli").await;
    let item = item.to_string();
    let args = [
        "reconcile",
        "resolve",
        &item,
        "--as",
        "redispatch",
        "--note",
        "resend",
    ];
    let err = cli.fails(&args).await;
    assert!(
        err.contains("--confirm-may-act-twice") && err.contains("may act twice"),
        "{err}"
    );
    assert_eq!(h.intent(intent).await.state, IntentState::Unknown);
    assert_eq!(audit_entries(&h, intent).await, 0);
    let mut confirmed = args.to_vec();
    confirmed.push("--confirm-may-act-twice");
    cli.ok(&confirmed).await;
    assert_eq!(h.intent(intent).await.state, IntentState::Pending);
    assert_eq!(audit_entries(&h, intent).await, 1);
}

/// A listed item that is already resolved is reported as such and asks for nothing: its
/// intent's risk does not refuse a run whose open items need no confirmation.
async fn a_resolved_item_does_not_make_the_api_ask(t: &TestDb) {
    let h = Harness::with_retention(t, Duration::from_millis(1)).await;
    let (closed, closed_item) = unknown_intent(&h, "acme", "notify-closed").await;
    let (open, open_item) = keyed_unknown_past_its_key(&h, "acme", "refund-open").await;
    // Inside the console's key window again: resending it cannot act twice.
    exec(
        &h.db,
        &format!("UPDATE outbox_intents SET first_sent_at = first_sent_at + 172800000 WHERE id = {open}"),
        &format!("UPDATE outbox_intents SET first_sent_at = first_sent_at + interval '2 days' WHERE id = {open}"),
    )
    .await;
    let server = AdminServer::start(&h.db).await;
    let api = server.api(Some(ACME_OPS));
    let path = format!("/v1/reconciliation/{closed_item}/resolve");
    let (status, done) = api
        .post(
            &path,
            json!({"resolution": "abandoned", "note": "checked: never sent"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{done}");

    let run = json!({"dry_run": false, "note": "resend", "item_ids": [closed_item, open_item]});
    let (status, done) = api.post("/v1/reconciliation/redispatch", run).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(h.intent(open).await.state, IntentState::Pending);
    assert_ne!(h.intent(closed).await.state, IntentState::Pending);
}

crate::both_backends!(
    bulk_redispatch_past_the_key_window_needs_confirmation,
    the_item_page_asks_before_a_resend_that_may_act_twice,
    the_api_asks_before_a_resend_that_may_act_twice,
    the_cli_asks_before_a_resend_that_may_act_twice,
    a_resolved_item_does_not_make_the_api_ask
);
