//! Key retention against a provider that really forgets keys: the fake provider is told to
//! forget an idempotency key after the same retention the action declares, so a resend
//! after that point would be a second effect at the provider. The key-retention guards
//! (at retry planning and again at send time) must send the intent to reconciliation
//! instead, keeping `duplicated` at zero.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use outboxd::fake_provider::{Fault, FaultRule, Matcher};
use outboxd::intent::IntentState;
use outboxd::store::{ResendApproval, Resolution, ResolutionKind, TenantScope};
use support::harness::{exec, Harness, REFUND};
use support::invariants::assert_invariants;
use support::TestDb;

/// The action's declared key retention, and how long the provider remembers a key. Longer
/// than the harness' request timeout (700 ms), so an immediate retry is inside it.
const RETENTION: Duration = Duration::from_secs(2);

fn once_for(key: &str, fault: Fault) -> FaultRule {
    FaultRule {
        matcher: Matcher::Key(key.to_owned()),
        fault,
        times: 1,
    }
}

/// First attempt: "500 after apply" (ambiguous, the effect exists). Second attempt, right
/// away and inside the retention: "429, Retry-After: 3" — a retry that would land after
/// the provider forgot the key. The intent must go to reconciliation; even once the
/// provider has forgotten the key and the retry would be due, nothing is resent.
async fn ambiguous_then_retry_after_beyond_key_expiry_is_not_resent(t: &TestDb) {
    let h = Harness::with_retention(t, RETENTION).await;
    h.provider.set_key_expiry(Some(RETENTION));
    let r = h.enqueue_simple("op-expiring-key", REFUND).await;
    let key = r.idempotency_key.clone();
    h.provider
        .push_fault(once_for(&key, Fault::Status500AfterApply));
    h.provider.push_fault(once_for(
        &key,
        Fault::StatusWithoutApply {
            status: 429,
            retry_after: Some("3".into()),
        },
    ));
    h.dispatcher.drain().await.unwrap();
    assert_eq!(
        h.provider.request_count_for_key(&key),
        2,
        "the safe retry inside the retention was sent"
    );
    let applied_at = h.provider.effects_for_key(&key)[0].at;
    // Let the provider forget the key (wall clock: its memory is what is under test), then
    // make anything still pending due and drain again.
    let forgotten_at = applied_at + chrono::Duration::from_std(RETENTION).unwrap();
    let wait = (forgotten_at - chrono::Utc::now() + chrono::Duration::milliseconds(100))
        .to_std()
        .unwrap_or_default();
    tokio::time::sleep(wait.min(RETENTION * 2)).await;
    h.make_due().await;
    h.dispatcher.drain().await.unwrap();
    let report = assert_invariants(&h).await;
    assert_eq!(report.duplicated, 0);
    assert_eq!(h.provider.effects_for_key(&key).len(), 1, "one effect");
    assert_eq!(
        h.provider.request_count_for_key(&key),
        2,
        "not resent after the provider forgot the key"
    );
    let intent = h.intent(r.intent_id).await;
    assert_eq!(intent.state, IntentState::Unknown, "{intent:?}");
    assert_eq!(h.open_items(r.intent_id).await, 1);
}

/// A person redispatches a keyed unknown intent while the provider still remembers its key,
/// so no confirmation is asked; the resend is claimed only after the key may have been
/// forgotten (a backlog, a stopped daemon). The person never confirmed that risk, so the
/// dispatcher does not send it: back to reconciliation, one request fewer than a blind
/// resend.
async fn a_redispatch_approved_inside_the_key_window_is_not_sent_after_it(t: &TestDb) {
    let h = Harness::new(t).await;
    let r = h.enqueue_simple("op-late-resend", REFUND).await;
    let key = r.idempotency_key.clone();
    h.provider.push_fault(FaultRule {
        matcher: Matcher::Key(key.clone()),
        fault: Fault::Status500AfterApply,
        times: 5,
    });
    for _ in 0..10 {
        h.dispatcher.drain().await.unwrap();
        if h.intent(r.intent_id).await.state == IntentState::Unknown {
            break;
        }
        h.make_due().await;
    }
    assert_eq!(h.intent(r.intent_id).await.state, IntentState::Unknown);
    let requests = h.provider.request_count_for_key(&key);
    let item = h
        .store
        .reconciliation_for_intent(r.intent_id)
        .await
        .unwrap()[0]
        .id;
    let resolution = Resolution {
        item_id: item,
        scope: TenantScope::All,
        kind: ResolutionKind::Redispatch,
        actor: "ops-alice".into(),
        note: "inside the key window".into(),
        now: chrono::Utc::now(),
        resend: ResendApproval {
            policies: Arc::new(h.actions.resend_policies()),
            confirmed_may_act_twice: false,
        },
        seen_attempt_count: None,
    };
    h.store
        .resolve_reconciliation(&resolution)
        .await
        .expect("inside the window: no confirmation needed");
    // The redispatch happened ten minutes ago; the key was first sent 24 h ago, so the
    // provider may forget it from now on.
    let id = r.intent_id;
    exec(
        &h.db,
        &format!("UPDATE outbox_intents SET first_sent_at = CAST(strftime('%s','now') AS INTEGER) * 1000 - 86400000, \
            budget_started_at = CAST(strftime('%s','now') AS INTEGER) * 1000 - 600000 WHERE id = {id}"),
        &format!("UPDATE outbox_intents SET first_sent_at = now() - interval '24 hours', \
            budget_started_at = now() - interval '10 minutes' WHERE id = {id}"),
    )
    .await;
    h.dispatcher.drain().await.unwrap();
    assert_eq!(
        h.provider.request_count_for_key(&key),
        requests,
        "not resent"
    );
    let intent = h.intent(id).await;
    assert_eq!(intent.state, IntentState::Unknown, "{intent:?}");
    assert!(
        intent
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("may have forgotten the idempotency key")),
        "{intent:?}"
    );
    assert_eq!(h.open_items(id).await, 1);
}

both_backends!(
    ambiguous_then_retry_after_beyond_key_expiry_is_not_resent,
    a_redispatch_approved_inside_the_key_window_is_not_sent_after_it
);
