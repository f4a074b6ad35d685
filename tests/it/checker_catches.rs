//! The invariant checker can fail: a small real run (both backends) is checked clean, then
//! copies of its evidence are broken one fact at a time — the kind of record a regression
//! would leave — and each copy must be reported. The checker's counts come from the
//! provider's effect and request logs, not from the dispatcher's own counters, so the
//! mutations below also clear `ambiguous_attempts` where a misclassifying dispatcher would.

use crate::support;

use chrono::Utc;
use outboxd::checker::{CheckReport, Evidence};
use outboxd::fake_provider::{Fault, FaultRule, Matcher};
use outboxd::intent::{IntentId, IntentState};
use outboxd::store::IntentRow;
use support::harness::{Harness, NOTIFY, REFUND};
use support::TestDb;

fn once_for(key: &str, fault: Fault) -> FaultRule {
    FaultRule {
        matcher: Matcher::Key(key.to_owned()),
        fault,
        times: 1,
    }
}

/// The run: a keyed intent delivered after a "500 after apply", a not-idempotent one in
/// reconciliation after the same fault, a plain delivery and a definite 400.
struct Run {
    evidence: Evidence,
    keyed_after_500: IntentId,
    unkeyed_after_500: IntentId,
    plain: IntentId,
    rejected: IntentId,
}

async fn small_run(t: &TestDb) -> Run {
    let h = Harness::new(t).await;
    let a = h.enqueue_simple("op-keyed-500", REFUND).await;
    let b = h.enqueue_simple("op-unkeyed-500", NOTIFY).await;
    let c = h.enqueue_simple("op-plain", REFUND).await;
    let d = h.enqueue_simple("op-400", REFUND).await;
    for key in [&a.idempotency_key, &b.idempotency_key] {
        h.provider
            .push_fault(once_for(key, Fault::Status500AfterApply));
    }
    let rejected = Fault::StatusWithoutApply {
        status: 400,
        retry_after: None,
    };
    h.provider
        .push_fault(once_for(&d.idempotency_key, rejected));
    h.dispatcher.drain().await.unwrap();
    let evidence = Evidence::gather(h.store.as_ref(), &h.provider, &h.actions)
        .await
        .unwrap();
    let state = |id| {
        evidence
            .intents
            .iter()
            .find(|i: &&IntentRow| i.id == id)
            .unwrap()
            .state
    };
    assert_eq!(
        [a.intent_id, b.intent_id, c.intent_id, d.intent_id].map(state),
        [
            IntentState::Delivered,
            IntentState::Unknown,
            IntentState::Delivered,
            IntentState::Failed
        ]
    );
    Run {
        evidence,
        keyed_after_500: a.intent_id,
        unkeyed_after_500: b.intent_id,
        plain: c.intent_id,
        rejected: d.intent_id,
    }
}

fn intent(e: &mut Evidence, id: IntentId) -> &mut IntentRow {
    e.intents.iter_mut().find(|i| i.id == id).unwrap()
}

fn key_of(e: &Evidence, id: IntentId) -> String {
    e.intents
        .iter()
        .find(|i| i.id == id)
        .unwrap()
        .idempotency_key
        .to_string()
}

/// What a classifier regression records: a terminal failure, no ambiguity, no item.
fn reclassify_as_failed(e: &mut Evidence, id: IntentId) {
    let row = intent(e, id);
    row.state = IntentState::Failed;
    row.ambiguous_attempts = 0;
    row.provider_ref = None;
    e.open_reconciliation.remove(&id);
}

fn evaluate(e: &Evidence) -> CheckReport {
    e.evaluate(true, Utc::now())
}

async fn the_checker_reports_each_broken_fact(t: &TestDb) {
    let run = small_run(t).await;
    let clean = evaluate(&run.evidence);
    assert!(clean.is_clean(), "the real run is clean: {clean}");
    assert_eq!(clean.ambiguous, 2, "{clean}");

    // "500 after apply" recorded as rejected: failed, though the provider applied it.
    for id in [run.unkeyed_after_500, run.keyed_after_500] {
        let mut e = run.evidence.clone();
        reclassify_as_failed(&mut e, id);
        let r = evaluate(&e);
        assert_eq!(r.unaccounted_ambiguous, 1, "intent {id}: {r}");
    }

    // Unknown, but its reconciliation item was lost.
    let mut e = run.evidence.clone();
    e.open_reconciliation.remove(&run.unkeyed_after_500);
    assert_eq!(evaluate(&e).unaccounted_ambiguous, 1);

    // A not-idempotent intent quietly scheduled for another automatic attempt.
    let mut e = run.evidence.clone();
    intent(&mut e, run.unkeyed_after_500).state = IntentState::Pending;
    let r = e.evaluate(false, Utc::now());
    assert_eq!(r.unaccounted_ambiguous, 1, "{r}");

    // Delivered without the provider's reference, or with another one.
    let mut e = run.evidence.clone();
    intent(&mut e, run.plain).provider_ref = None;
    assert_eq!(evaluate(&e).reference_mismatches, 1);
    let mut e = run.evidence.clone();
    intent(&mut e, run.plain).provider_ref = Some("ref_999".into());
    assert_eq!(evaluate(&e).reference_mismatches, 1);

    // Delivered, but the provider never applied it.
    let mut e = run.evidence.clone();
    let key = key_of(&e, run.plain);
    e.effects.retain(|x| x.key.as_deref() != Some(key.as_str()));
    assert_eq!(evaluate(&e).lost, 1);

    // A key applied twice.
    let mut e = run.evidence.clone();
    let key = key_of(&e, run.keyed_after_500);
    let mut twice = e
        .effects
        .iter()
        .find(|x| x.key.as_deref() == Some(key.as_str()))
        .unwrap()
        .clone();
    twice.reference = "ref_twice".into();
    e.effects.push(twice);
    assert_eq!(evaluate(&e).duplicated, 1);

    // A not-idempotent action resent after the ambiguous request (not attributed to an
    // attempt either: the dispatcher recorded one).
    let mut e = run.evidence.clone();
    let key = key_of(&e, run.unkeyed_after_500);
    let mut resend = e
        .requests
        .iter()
        .find(|x| x.idempotency_key.as_deref() == Some(key.as_str()))
        .unwrap()
        .clone();
    resend.seq = 10_000;
    resend.fault = None;
    e.requests.push(resend);
    let r = evaluate(&e);
    assert_eq!((r.duplicated, r.unattributed_requests), (1, 1), "{r}");

    // A definite refusal, yet the provider has an effect for the key.
    let mut e = run.evidence.clone();
    let key = key_of(&e, run.rejected);
    let mut effect = e.effects[0].clone();
    effect.key = Some(key);
    effect.reference = "ref_rejected".into();
    e.effects.push(effect);
    assert_eq!(evaluate(&e).unaccounted_ambiguous, 1);

    // An effect no intent explains.
    let mut e = run.evidence.clone();
    let mut stray = e.effects[0].clone();
    stray.key = Some("nobody's key".into());
    e.effects.push(stray);
    assert_eq!(evaluate(&e).unexpected, 1);

    // Left in flight with an expired lease in a run that should be settled.
    let mut e = run.evidence.clone();
    let row = intent(&mut e, run.plain);
    row.state = IntentState::InFlight;
    row.lease_expires_at = Some(Utc::now() - chrono::Duration::seconds(1));
    let r = evaluate(&e);
    assert_eq!((r.lost, r.stale_leases), (1, 1), "{r}");
}

both_backends!(the_checker_reports_each_broken_fact);
