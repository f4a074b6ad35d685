//! Automatic status probes against the fake provider (`GET /lookup/<key>`), on both
//! backends: found → resolved delivered by the probe; not found for a keyed action inside
//! key retention → redispatched, then delivered with exactly one provider effect; a probe
//! error, a not-idempotent action, or a key outside retention → left for a person with the
//! finding attached.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use outboxd::action::RetrySafety;
use outboxd::config::NotFoundMeaning;
use outboxd::dispatch::{ActionTable, Dispatcher};
use outboxd::fake_provider::{Fault, FaultRule, Matcher};
use outboxd::intent::{IntentId, IntentState};
use outboxd::reconcile::{run_probes_once, ProbeReport, ProbeRuntime, ProbeSettings};
use outboxd::store::{ReconciliationItem, TenantScope};
use outboxd::NewIntent;
use serde_json::json;
use support::harness::{test_actions, test_settings, Harness, NOTIFY, REFUND};
use support::invariants::assert_invariants;
use support::TestDb;

const DAY: Duration = Duration::from_secs(86_400);

/// The harness' actions with a lookup probe (`not_found_means = not_applied`) on both,
/// and a provider that remembers keys for `key_retention`.
fn probed_actions(h: &Harness, key_retention: Duration) -> ActionTable {
    let plain = test_actions(&h.provider, key_retention);
    let lookup = ProbeRuntime {
        method: reqwest::Method::GET,
        path: "/lookup/{idempotency_key}".into(),
        reference_pointer: Some("/id".into()),
        not_found_status: vec![404],
        not_found_means: NotFoundMeaning::NotApplied,
    };
    ActionTable::new([REFUND, NOTIFY].map(|name| {
        let mut action = plain.get(name).expect("action").as_ref().clone();
        action.probe = Some(lookup.clone());
        action
    }))
}

/// Probe settings that probe every open item on every pass.
fn every_pass() -> ProbeSettings {
    ProbeSettings {
        min_interval: Duration::ZERO,
        ..ProbeSettings::default()
    }
}

async fn probe(h: &Harness, actions: &ActionTable) -> ProbeReport {
    run_probes_once(h.store.as_ref(), actions, &every_pass())
        .await
        .expect("probe pass")
}

/// A keyed intent whose only attempt hit `fault`, made unknown because the harness'
/// dispatcher believes the provider forgets keys at once (zero key retention), so it may
/// not retry. Returns (intent id, key).
async fn unknown_keyed(h: &Harness, op: &str, fault: Fault) -> (IntentId, String) {
    let r = h
        .enqueue(NewIntent::new("acme", op, REFUND, json!({"op": op})))
        .await;
    h.provider.push_fault(FaultRule {
        matcher: Matcher::Key(r.idempotency_key.clone()),
        fault,
        times: 1,
    });
    h.dispatcher.drain().await.unwrap();
    assert_eq!(h.intent(r.intent_id).await.state, IntentState::Unknown);
    (r.intent_id, r.idempotency_key)
}

async fn only_item(h: &Harness, intent_id: IntentId) -> ReconciliationItem {
    let items = h.store.reconciliation_for_intent(intent_id).await.unwrap();
    assert_eq!(items.len(), 1, "{items:?}");
    items.into_iter().next().unwrap()
}

async fn found_resolves_delivered_by_the_probe(t: &TestDb) {
    let h = Harness::with_retention(t, Duration::ZERO).await;
    let (intent_id, key) = unknown_keyed(&h, "op-found", Fault::Status500AfterApply).await;
    let reference = h.provider.reference_for_key(&key).expect("applied once");
    let report = probe(&h, &probed_actions(&h, DAY)).await;
    assert_eq!((report.probed, report.delivered), (1, 1), "{report:?}");
    let intent = h.intent(intent_id).await;
    assert_eq!(
        (intent.state, intent.provider_ref.as_deref()),
        (IntentState::Delivered, Some(reference.as_str()))
    );
    let item = only_item(&h, intent_id).await;
    assert_eq!(item.resolution.as_deref(), Some("delivered"));
    assert_eq!(item.resolved_by.as_deref(), Some("probe"));
    assert_eq!(
        item.resolved_provider_ref.as_deref(),
        Some(reference.as_str())
    );
    let note = item.resolution_note.unwrap();
    assert!(
        note.contains(&format!("GET /lookup/{key}")) && note.contains("HTTP 200"),
        "{note}"
    );
    let audit = h
        .store
        .list_audit(&TenantScope::All, None, 5)
        .await
        .unwrap();
    assert_eq!(
        (audit[0].actor.as_str(), audit[0].action.as_str()),
        ("probe", "reconciliation.resolve")
    );
    assert_eq!(h.provider.effects_for_key(&key).len(), 1);
    // Nothing is left to probe.
    assert_eq!(probe(&h, &probed_actions(&h, DAY)).await.probed, 0);
    assert_invariants(&h).await;
}

async fn not_found_inside_retention_redispatches_once(t: &TestDb) {
    let h = Harness::with_retention(t, Duration::ZERO).await;
    let never_applied = Fault::StatusWithoutApply {
        status: 500,
        retry_after: None,
    };
    let (intent_id, key) = unknown_keyed(&h, "op-missing", never_applied).await;
    assert!(h.provider.effects_for_key(&key).is_empty());
    let report = probe(&h, &probed_actions(&h, DAY)).await;
    assert_eq!((report.probed, report.redispatched), (1, 1), "{report:?}");
    let item = only_item(&h, intent_id).await;
    assert_eq!(
        (item.resolution.as_deref(), item.resolved_by.as_deref()),
        (Some("redispatch"), Some("probe"))
    );
    assert!(item.resolution_note.unwrap().contains("HTTP 404"));
    assert_eq!(h.intent(intent_id).await.state, IntentState::Pending);
    // The daemon the probe runs in (the same actions: keys kept a day) sends it again with
    // the same key: exactly one effect. The harness' own dispatcher believes keys are
    // forgotten at once, so it would refuse the resend nobody confirmed
    // (tests/resend_confirmation.rs).
    let daemon = Dispatcher::new(
        h.db.claim_store(),
        Arc::new(probed_actions(&h, DAY)),
        test_settings("daemon"),
    );
    daemon.drain().await.unwrap();
    let delivered = h.intent(intent_id).await;
    assert_eq!(delivered.state, IntentState::Delivered);
    let effects = h.provider.effects_for_key(&key);
    assert_eq!(effects.len(), 1);
    assert_eq!(delivered.provider_ref, Some(effects[0].reference.clone()));
    assert_eq!(h.open_items(intent_id).await, 0);
    assert_invariants(&h).await;
}

async fn probe_error_leaves_the_item_with_a_finding(t: &TestDb) {
    let h = Harness::with_retention(t, Duration::ZERO).await;
    let (intent_id, key) = unknown_keyed(&h, "op-probe-500", Fault::Status500AfterApply).await;
    h.provider.push_fault(FaultRule {
        matcher: Matcher::PathPrefix("/lookup/".into()),
        fault: Fault::Status500AfterApply,
        times: 1,
    });
    let actions = probed_actions(&h, DAY);
    let report = probe(&h, &actions).await;
    assert_eq!(
        (report.probed, report.left_for_person),
        (1, 1),
        "{report:?}"
    );
    let item = only_item(&h, intent_id).await;
    assert_eq!(item.resolution, None);
    assert_eq!(item.probe_count, 1);
    let finding = item.probe_finding.unwrap();
    assert!(
        finding.contains("HTTP 500") && finding.contains("nothing concluded"),
        "{finding}"
    );
    assert_eq!(h.intent(intent_id).await.state, IntentState::Unknown);
    // The next pass, with the provider healthy again, resolves it.
    let report = probe(&h, &actions).await;
    assert_eq!(report.delivered, 1, "{report:?}");
    assert_eq!(
        h.intent(intent_id).await.provider_ref,
        h.provider.reference_for_key(&key)
    );
    assert_invariants(&h).await;
}

async fn not_idempotent_not_found_is_left_for_a_person(t: &TestDb) {
    let h = Harness::new(t).await;
    let r = h
        .enqueue(NewIntent::new("acme", "op-notify", NOTIFY, json!({"n": 1})))
        .await;
    h.provider.push_fault(FaultRule {
        matcher: Matcher::Key(r.idempotency_key.clone()),
        fault: Fault::LoseResponseAfterApply,
        times: 1,
    });
    h.dispatcher.drain().await.unwrap();
    assert_eq!(h.intent(r.intent_id).await.state, IntentState::Unknown);
    // Actions without a probe are not probed at all.
    let requests = h.provider.request_count();
    assert_eq!(probe(&h, &h.actions).await, ProbeReport::default());
    assert_eq!(h.provider.request_count(), requests);
    // With a probe: the lookup says 404, but a not-idempotent action is never resent by it.
    let report = probe(&h, &probed_actions(&h, DAY)).await;
    assert_eq!(
        (report.probed, report.left_for_person),
        (1, 1),
        "{report:?}"
    );
    let item = only_item(&h, r.intent_id).await;
    assert_eq!(item.resolution, None);
    let finding = item.probe_finding.unwrap();
    assert!(
        finding.contains(RetrySafety::NotIdempotent.as_str()),
        "{finding}"
    );
    assert_eq!(h.intent(r.intent_id).await.state, IntentState::Unknown);
    h.dispatcher.drain().await.unwrap();
    assert_eq!(h.provider.effects().len(), 1, "no automatic resend");
    assert_invariants(&h).await;
}

async fn not_found_outside_key_retention_is_left_for_a_person(t: &TestDb) {
    let h = Harness::with_retention(t, Duration::ZERO).await;
    let never_applied = Fault::StatusWithoutApply {
        status: 502,
        retry_after: None,
    };
    let (intent_id, _key) = unknown_keyed(&h, "op-old-key", never_applied).await;
    let report = probe(&h, &probed_actions(&h, Duration::ZERO)).await;
    assert_eq!(report.left_for_person, 1, "{report:?}");
    let item = only_item(&h, intent_id).await;
    assert_eq!(item.resolution, None);
    let finding = item.probe_finding.unwrap();
    assert!(finding.contains("key retention"), "{finding}");
    assert_eq!(h.intent(intent_id).await.state, IntentState::Unknown);
    assert_invariants(&h).await;
}

both_backends!(
    found_resolves_delivered_by_the_probe,
    not_found_inside_retention_redispatches_once,
    probe_error_leaves_the_item_with_a_finding,
    not_idempotent_not_found_is_left_for_a_person,
    not_found_outside_key_retention_is_left_for_a_person,
);
