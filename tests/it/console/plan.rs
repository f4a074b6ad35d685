//! A bulk change applies exactly the dry run it confirms: each listed line is
//! `id:state:attempt_count` signed under the console's key, so a tampered or unsigned plan
//! is refused whole (400, nothing changed), a line whose intent moved on since the dry run
//! is skipped and reported, and a line listed twice is applied once.

use std::time::Duration;

use outboxd::fake_provider::{Fault, FaultRule, Matcher};
use outboxd::intent::IntentState;
use outboxd::store::Redispatch;
use reqwest::StatusCode;

use super::failed_intent;
use super::page::Page;
use super::resend::{apply_fields, audit_entries, keyed_unknown_past_its_key, post_fields};
use crate::support::admin::{AdminServer, ACME_OPS, GLOBEX_OPS};
use crate::support::harness::{exec, Harness, REFUND};
use crate::support::TestDb;

const NOTE: [(&str, &str); 1] = [("note", "provider fixed it")];

async fn a_tampered_plan_changes_nothing(t: &TestDb) {
    let h = Harness::new(t).await;
    let listed = failed_intent(&h, "acme", "refund-listed", REFUND).await;
    let other = failed_intent(&h, "acme", "refund-other", REFUND).await;
    failed_intent(&h, "globex", "globex-refund", REFUND).await;
    let server = AdminServer::start(&h.db).await;
    let page = Page::sign_in(&server, ACME_OPS).await;
    let dry = page
        .get(&format!("/review/intents/bulk?op=redispatch&id={listed}"))
        .await;
    let fields = apply_fields(&dry);
    let (from, to) = (listed.to_string(), other.to_string());
    let tampered: Vec<(String, String)> = fields
        .iter()
        .map(|(name, value)| {
            let swapped = match value.split_once(':') {
                Some((id, rest)) if id == from => format!("{to}:{rest}"),
                _ if *value == from => to.clone(),
                _ => value.clone(),
            };
            (name.clone(), swapped)
        })
        .collect();
    assert_ne!(tampered, fields, "the plan names {listed}");
    let refused = post_fields(&page, &tampered, &NOTE).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.text);
    let mut unsigned: Vec<(String, String)> = fields
        .iter()
        .filter(|(name, _)| name != "line")
        .cloned()
        .collect();
    unsigned.push(("id".into(), other.to_string()));
    let refused = post_fields(&page, &unsigned, &NOTE).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.text);
    for id in [listed, other] {
        assert_eq!(h.intent(id).await.state, IntentState::Failed, "#{id}");
        assert_eq!(audit_entries(&h, id).await, 0, "#{id}");
    }
    // Another tenant's operator cannot use acme's signed plan either.
    let globex = Page::sign_in(&server, GLOBEX_OPS).await;
    let mut theirs: Vec<(String, String)> = fields
        .iter()
        .filter(|(name, _)| name != "csrf")
        .cloned()
        .collect();
    let globex_csrf = globex
        .get("/review/intents/bulk?op=redispatch&state=failed")
        .await
        .csrf();
    theirs.push(("csrf".into(), globex_csrf));
    let refused = post_fields(&globex, &theirs, &NOTE).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.text);
    assert_eq!(h.intent(listed).await.state, IntentState::Failed);
}

async fn an_intent_changed_since_the_dry_run_is_skipped(t: &TestDb) {
    let h = Harness::new(t).await;
    let moved = failed_intent(&h, "acme", "refund-moved", REFUND).await;
    let steady = failed_intent(&h, "acme", "refund-steady", REFUND).await;
    let server = AdminServer::start(&h.db).await;
    let page = Page::sign_in(&server, ACME_OPS).await;
    let dry = page
        .get(&format!(
            "/review/intents/bulk?op=redispatch&id={moved}&id={steady}"
        ))
        .await;
    let fields = apply_fields(&dry);
    // Meanwhile someone else redispatches it and the provider refuses it again: failed
    // again, one attempt more than the dry run saw.
    let before = h.intent(moved).await;
    let redispatch = Redispatch {
        intent_id: moved,
        scope: outboxd::store::TenantScope::All,
        actor: "someone-else".into(),
        note: "retry".into(),
        now: chrono::Utc::now(),
        resend: Default::default(),
        seen_attempt_count: None,
    };
    h.store.redispatch_failed(&redispatch).await.unwrap();
    h.provider.push_fault(FaultRule {
        matcher: Matcher::Key(before.idempotency_key.to_string()),
        fault: Fault::StatusWithoutApply {
            status: 400,
            retry_after: None,
        },
        times: 1,
    });
    h.dispatcher.drain().await.unwrap();
    let after = h.intent(moved).await;
    assert_eq!(after.state, IntentState::Failed);
    assert_eq!(after.attempt_count, before.attempt_count + 1);

    let done = post_fields(&page, &fields, &NOTE).await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.text);
    assert!(done.text.contains("1 of 2"), "{}", done.text);
    let line = done
        .text
        .split(&format!("id=\"line-{moved}\""))
        .nth(1)
        .and_then(|rest| rest.split("</tr>").next())
        .unwrap_or_else(|| panic!("no line for #{moved}: {}", done.text));
    assert!(
        line.contains("changed since the dry run; not applied"),
        "{line}"
    );
    assert_eq!(h.intent(moved).await.state, IntentState::Failed);
    assert_eq!(h.intent(steady).await.state, IntentState::Pending);
    // Only the other person's redispatch is in its audit log.
    assert_eq!(audit_entries(&h, moved).await, 1);
}

async fn a_line_listed_twice_is_applied_once(t: &TestDb) {
    let h = Harness::new(t).await;
    let failed = failed_intent(&h, "acme", "refund-twice", REFUND).await;
    let server = AdminServer::start(&h.db).await;
    let page = Page::sign_in(&server, ACME_OPS).await;
    let dry = page
        .get(&format!(
            "/review/intents/bulk?op=redispatch&id={failed}&id={failed}"
        ))
        .await;
    let mut fields = apply_fields(&dry);
    let listed: Vec<(String, String)> = fields
        .iter()
        .filter(|(name, _)| name == "line" || name == "id")
        .cloned()
        .collect();
    fields.extend(listed);
    let done = post_fields(&page, &fields, &NOTE).await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.text);
    assert!(done.text.contains("1 of 1"), "{}", done.text);
    assert_eq!(h.intent(failed).await.state, IntentState::Pending);
    assert_eq!(audit_entries(&h, failed).await, 1);
    // Sending the same confirmed form again changes nothing more.
    let replayed = post_fields(&page, &fields, &NOTE).await;
    assert!(
        replayed.text.contains("0 of 1") && replayed.text.contains("changed since the dry run"),
        "{}",
        replayed.text
    );
    assert_eq!(audit_entries(&h, failed).await, 1);
}

async fn a_forged_plan_time_is_refused(t: &TestDb) {
    let h = Harness::new(t).await;
    let failed = failed_intent(&h, "acme", "refund-forged-time", REFUND).await;
    let server = AdminServer::start(&h.db).await;
    let page = Page::sign_in(&server, ACME_OPS).await;
    let dry = page
        .get(&format!("/review/intents/bulk?op=redispatch&id={failed}"))
        .await;
    for forged in [
        i64::MIN.to_string(),
        i64::MAX.to_string(),
        "0".into(),
        "x".into(),
    ] {
        let fields: Vec<(String, String)> = apply_fields(&dry)
            .into_iter()
            .map(|(name, value)| match name.as_str() {
                "plan_at" => (name, forged.clone()),
                _ => (name, value),
            })
            .collect();
        let refused = post_fields(&page, &fields, &NOTE).await;
        assert_eq!(
            refused.status,
            StatusCode::BAD_REQUEST,
            "{forged}: {}",
            refused.text
        );
    }
    assert_eq!(h.intent(failed).await.state, IntentState::Failed);
    assert_eq!(audit_entries(&h, failed).await, 0);
}

/// The confirmation covers only the lines whose risk the dry run showed: a line shown as
/// safe to resend that may act twice by the time the plan is applied (its key window
/// closed meanwhile) is not applied, though the box was ticked for another line, and
/// nothing is recorded for it.
async fn a_line_that_became_risky_after_the_dry_run_is_not_applied(t: &TestDb) {
    let h = Harness::with_retention(t, Duration::from_millis(1)).await;
    let (risky, _) = keyed_unknown_past_its_key(&h, "acme", "refund-risky").await;
    let (later, _) = keyed_unknown_past_its_key(&h, "acme", "refund-later").await;
    let shift = |sign: &str| {
        (
            format!("UPDATE outbox_intents SET first_sent_at = first_sent_at {sign} 172800000 WHERE id = {later}"),
            format!("UPDATE outbox_intents SET first_sent_at = first_sent_at {sign} interval '2 days' WHERE id = {later}"),
        )
    };
    let (lite, pg) = shift("+");
    exec(&h.db, &lite, &pg).await;
    let server = AdminServer::start(&h.db).await;
    let page = Page::sign_in(&server, ACME_OPS).await;
    let dry = page
        .get(&format!(
            "/review/intents/bulk?op=redispatch&id={risky}&id={later}"
        ))
        .await;
    assert!(
        dry.text.contains("1 of these redispatches may act twice"),
        "{}",
        dry.text
    );
    let fields = apply_fields(&dry);
    // Meanwhile the provider's key window for the other one closes too.
    let (lite, pg) = shift("-");
    exec(&h.db, &lite, &pg).await;

    let confirm = [("note", "resend"), ("confirm_may_act_twice", "yes")];
    let done = post_fields(&page, &fields, &confirm).await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.text);
    assert!(done.text.contains("1 of 2"), "{}", done.text);
    let line = done
        .text
        .split(&format!("id=\"line-{later}\""))
        .nth(1)
        .and_then(|rest| rest.split("</tr>").next())
        .unwrap_or_else(|| panic!("no line for #{later}: {}", done.text));
    assert!(line.contains("may act twice now"), "{line}");
    assert_eq!(h.intent(risky).await.state, IntentState::Pending);
    assert_eq!(audit_entries(&h, risky).await, 1);
    assert_eq!(h.intent(later).await.state, IntentState::Unknown);
    assert_eq!(audit_entries(&h, later).await, 0);
}

crate::both_backends!(
    a_tampered_plan_changes_nothing,
    an_intent_changed_since_the_dry_run_is_skipped,
    a_line_listed_twice_is_applied_once,
    a_forged_plan_time_is_refused,
    a_line_that_became_risky_after_the_dry_run_is_not_applied,
);
