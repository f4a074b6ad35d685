//! Reconciliation, cancellation, audit and retention in the store, on both backends:
//! every resolution moves the intent and leaves an audit entry; concurrent resolutions
//! have exactly one winner; scopes hide other tenants; pruning keeps tombstones that
//! answer late enqueues without a second provider request.

use crate::support;

use chrono::Utc;
use outboxd::fake_provider::{Fault, FaultRule, Matcher};
use outboxd::intent::{IntentId, IntentState};
use outboxd::store::{
    Cancellation, ReconciliationFilter, ReconciliationItemId, ResendApproval, Resolution,
    ResolutionKind, ReviewError, TenantScope,
};
use outboxd::{EnqueueError, NewIntent};
use serde_json::json;
use support::harness::{operation, tenant, Harness, NOTIFY, REFUND};
use support::invariants::assert_invariants;
use support::TestDb;

/// Enqueues a not-idempotent intent whose response is lost, so it lands in reconciliation.
async fn unknown_intent(h: &Harness, tenant: &str, op: &str) -> (IntentId, ReconciliationItemId) {
    let r = h
        .enqueue(NewIntent::new(tenant, op, NOTIFY, json!({"op": op})))
        .await;
    h.provider.push_fault(FaultRule {
        matcher: Matcher::Key(r.idempotency_key.clone()),
        fault: Fault::LoseResponseAfterApply,
        times: 1,
    });
    h.dispatcher.drain().await.unwrap();
    assert_eq!(h.intent(r.intent_id).await.state, IntentState::Unknown);
    let items = h
        .store
        .reconciliation_for_intent(r.intent_id)
        .await
        .unwrap();
    assert_eq!(items.len(), 1);
    (r.intent_id, items[0].id)
}

fn resolution(item_id: ReconciliationItemId, kind: ResolutionKind) -> Resolution {
    Resolution {
        item_id,
        scope: TenantScope::All,
        kind,
        actor: "ops-alice".into(),
        note: "checked the provider dashboard".into(),
        now: Utc::now(),
        // The person checked at the provider and confirmed a resend that may act twice.
        resend: ResendApproval {
            confirmed_may_act_twice: true,
            ..ResendApproval::default()
        },
        seen_attempt_count: None,
    }
}

async fn resolve_as_delivered_records_reference_and_audit(t: &TestDb) {
    let h = Harness::new(t).await;
    let (intent_id, item_id) = unknown_intent(&h, "acme", "op-1").await;
    let queue = h
        .store
        .list_reconciliation(&ReconciliationFilter::open(TenantScope::All, 50))
        .await
        .unwrap();
    assert_eq!(
        queue.iter().map(|i| i.id).collect::<Vec<_>>(),
        vec![item_id]
    );
    let key = queue[0].idempotency_key.as_str();
    let provider_ref = h.provider.effects_for_key(key)[0].reference.clone();
    let item = h
        .store
        .resolve_reconciliation(&resolution(
            item_id,
            ResolutionKind::Delivered {
                provider_ref: provider_ref.clone(),
            },
        ))
        .await
        .unwrap();
    assert_eq!(
        (item.resolution.as_deref(), item.resolved_by.as_deref()),
        (Some("delivered"), Some("ops-alice"))
    );
    let intent = h.intent(intent_id).await;
    assert_eq!(
        (intent.state, intent.provider_ref.as_deref()),
        (IntentState::Delivered, Some(provider_ref.as_str()))
    );
    assert!(h
        .store
        .list_reconciliation(&ReconciliationFilter::open(TenantScope::All, 50))
        .await
        .unwrap()
        .is_empty());
    let audit = h
        .store
        .list_audit(&TenantScope::All, None, 10)
        .await
        .unwrap();
    assert_eq!(audit.len(), 1);
    assert_eq!(
        (audit[0].action.as_str(), audit[0].actor.as_str()),
        ("reconciliation.resolve", "ops-alice")
    );
    assert_eq!(
        audit[0].note.as_deref(),
        Some("checked the provider dashboard")
    );
    assert_eq!(audit[0].intent_id, Some(intent_id));
    assert_invariants(&h).await;
}

async fn redispatch_sends_again_with_the_same_key(t: &TestDb) {
    let h = Harness::new(t).await;
    let (intent_id, item_id) = unknown_intent(&h, "acme", "op-redis-2").await;
    h.store
        .resolve_reconciliation(&resolution(item_id, ResolutionKind::Redispatch))
        .await
        .unwrap();
    let pending = h.intent(intent_id).await;
    assert_eq!(pending.state, IntentState::Pending);
    let step = h.dispatcher.drain().await.unwrap();
    assert!(step.delivered >= 1, "{step:?}");
    let delivered = h.intent(intent_id).await;
    assert_eq!(delivered.state, IntentState::Delivered);
    assert_eq!(
        h.provider
            .request_count_for_key(delivered.idempotency_key.as_str()),
        2,
        "resent once, with the same key"
    );
    let attempts = h.store.list_attempts(intent_id).await.unwrap();
    assert_eq!(attempts.len(), 2);
}

async fn abandon_is_terminal(t: &TestDb) {
    let h = Harness::new(t).await;
    let (intent_id, item_id) = unknown_intent(&h, "acme", "op-ab").await;
    h.store
        .resolve_reconciliation(&resolution(item_id, ResolutionKind::Abandoned))
        .await
        .unwrap();
    assert_eq!(h.intent(intent_id).await.state, IntentState::Abandoned);
    h.make_due().await;
    assert_eq!(h.dispatcher.drain().await.unwrap().claimed, 0);
}

async fn concurrent_resolutions_have_one_winner(t: &TestDb) {
    let h = Harness::new(t).await;
    let (_, item_id) = unknown_intent(&h, "acme", "op-race").await;
    let (a, b) = (h.store.clone(), h.store.clone());
    let first = tokio::spawn(async move {
        a.resolve_reconciliation(&resolution(item_id, ResolutionKind::Abandoned))
            .await
    });
    let second = tokio::spawn(async move {
        let mut r = resolution(item_id, ResolutionKind::Redispatch);
        r.actor = "ops-bob".into();
        b.resolve_reconciliation(&r).await
    });
    let results = [first.await.unwrap(), second.await.unwrap()];
    let wins = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(wins, 1, "{results:?}");
    let loser = results.iter().find_map(|r| r.as_ref().err()).unwrap();
    assert!(
        matches!(loser, ReviewError::AlreadyResolved { .. }),
        "{loser:?}"
    );
    assert!(loser.to_string().contains("already resolved"), "{loser}");
    assert_eq!(
        h.store
            .list_audit(&TenantScope::All, None, 10)
            .await
            .unwrap()
            .len(),
        1
    );
}

async fn scopes_hide_other_tenants(t: &TestDb) {
    let h = Harness::new(t).await;
    let (acme_intent, acme_item) = unknown_intent(&h, "acme", "op-s1").await;
    let (_, globex_item) = unknown_intent(&h, "globex", "op-s2").await;
    let globex = TenantScope::Only(vec!["globex".into()]);
    let seen = h
        .store
        .list_reconciliation(&ReconciliationFilter::open(globex.clone(), 50))
        .await
        .unwrap();
    assert_eq!(
        seen.iter().map(|i| i.id).collect::<Vec<_>>(),
        vec![globex_item]
    );
    assert!(h
        .store
        .get_reconciliation(acme_item, &globex)
        .await
        .unwrap()
        .is_none());
    let mut r = resolution(acme_item, ResolutionKind::Abandoned);
    r.scope = globex.clone();
    assert!(matches!(
        h.store.resolve_reconciliation(&r).await,
        Err(ReviewError::NotFound)
    ));
    assert_eq!(
        h.intent(acme_intent).await.state,
        IntentState::Unknown,
        "no effect on another tenant"
    );
    let cancel = Cancellation {
        intent_id: acme_intent,
        scope: globex,
        actor: "x".into(),
        note: "y".into(),
        now: Utc::now(),
        seen_attempt_count: None,
    };
    assert!(matches!(
        h.store.cancel_intent(&cancel).await,
        Err(ReviewError::NotFound)
    ));
}

async fn resolutions_need_a_note_and_a_reference(t: &TestDb) {
    let h = Harness::new(t).await;
    let (intent_id, item_id) = unknown_intent(&h, "acme", "op-v").await;
    let mut no_note = resolution(item_id, ResolutionKind::Abandoned);
    no_note.note = "  ".into();
    assert!(matches!(
        h.store.resolve_reconciliation(&no_note).await,
        Err(ReviewError::Invalid(f)) if f.field == "note"
    ));
    let mut no_actor = resolution(item_id, ResolutionKind::Abandoned);
    no_actor.actor = "".into();
    assert!(matches!(
        h.store.resolve_reconciliation(&no_actor).await,
        Err(ReviewError::Invalid(f)) if f.field == "actor"
    ));
    let no_ref = resolution(
        item_id,
        ResolutionKind::Delivered {
            provider_ref: "".into(),
        },
    );
    assert!(matches!(
        h.store.resolve_reconciliation(&no_ref).await,
        Err(ReviewError::Invalid(f)) if f.field == "provider_ref"
    ));
    assert_eq!(h.intent(intent_id).await.state, IntentState::Unknown);
    let blank_cancel = Cancellation {
        intent_id,
        scope: TenantScope::All,
        actor: "ops".into(),
        note: " ".into(),
        now: Utc::now(),
        seen_attempt_count: None,
    };
    assert!(matches!(
        h.store.cancel_intent(&blank_cancel).await,
        Err(ReviewError::Invalid(f)) if f.field == "note"
    ));
}

async fn cancel_only_pending(t: &TestDb) {
    let h = Harness::new(t).await;
    let pending = h
        .enqueue(
            NewIntent::new("acme", "op-c", REFUND, json!({}))
                .with_not_before(Utc::now() + chrono::Duration::hours(1)),
        )
        .await;
    let cancel = |id| Cancellation {
        intent_id: id,
        scope: TenantScope::All,
        actor: "ops".into(),
        note: "customer withdrew".into(),
        now: Utc::now(),
        seen_attempt_count: None,
    };
    let row = h
        .store
        .cancel_intent(&cancel(pending.intent_id))
        .await
        .unwrap();
    assert_eq!(row.state, IntentState::Cancelled);
    let done = h.enqueue_simple("op-d", REFUND).await;
    h.dispatcher.drain().await.unwrap();
    let err = h
        .store
        .cancel_intent(&cancel(done.intent_id))
        .await
        .unwrap_err();
    assert!(matches!(err, ReviewError::WrongState { .. }), "{err:?}");
    assert_eq!(
        h.store
            .list_audit(&TenantScope::All, None, 10)
            .await
            .unwrap()[0]
            .action,
        "intent.cancel"
    );
}

async fn pruning_keeps_tombstones_that_answer_late_enqueues(t: &TestDb) {
    let h = Harness::new(t).await;
    let intent = || NewIntent::new("acme", "op-old", REFUND, json!({"amount": 5}));
    let first = h.enqueue(intent()).await;
    h.dispatcher.drain().await.unwrap();
    let delivered = h.intent(first.intent_id).await;
    assert_eq!(delivered.state, IntentState::Delivered);
    let pruned = h
        .store
        .prune_finished(Utc::now() + chrono::Duration::seconds(1), Utc::now(), 100)
        .await
        .unwrap();
    assert_eq!(pruned, 1);
    assert!(h.store.get_intent(first.intent_id).await.unwrap().is_none());
    let tomb = h
        .store
        .find_tombstone(&tenant("acme"), &operation("op-old"))
        .await
        .unwrap()
        .expect("tombstone");
    assert_eq!(
        (tomb.final_state.as_str(), tomb.provider_ref.clone()),
        ("delivered", delivered.provider_ref.clone())
    );
    // A late retry of the same operation is answered from the tombstone...
    let late = h.enqueue(intent()).await;
    assert!(late.replayed);
    assert_eq!(
        (late.intent_id, late.state),
        (first.intent_id, IntentState::Delivered)
    );
    // ...and never executed again.
    let requests = h.provider.request_count();
    h.dispatcher.drain().await.unwrap();
    assert_eq!(h.provider.request_count(), requests);
    assert_eq!(
        support::harness::scalar(&h.db, "SELECT count(*) FROM outbox_intents").await,
        0
    );
    // Changed arguments against a tombstone: conflict.
    let changed = NewIntent::new("acme", "op-old", REFUND, json!({"amount": 6}));
    let err = match &h.db {
        outboxd::store::Database::Postgres(pool) => {
            let mut tx = pool.begin().await.unwrap();
            outboxd::enqueue(&mut tx, changed).await.unwrap_err()
        }
        outboxd::store::Database::Sqlite(pool) => {
            let mut tx = pool.begin().await.unwrap();
            outboxd::enqueue(&mut tx, changed).await.unwrap_err()
        }
    };
    assert!(matches!(err, EnqueueError::Conflict { .. }), "{err:?}");
    // Tombstones expire after their own window.
    assert_eq!(
        h.store
            .prune_tombstones(Utc::now() + chrono::Duration::seconds(1), 100)
            .await
            .unwrap(),
        1
    );
    assert!(h
        .store
        .find_tombstone(&tenant("acme"), &operation("op-old"))
        .await
        .unwrap()
        .is_none());
}

async fn unfinished_intents_are_never_pruned(t: &TestDb) {
    let h = Harness::new(t).await;
    let (intent_id, _) = unknown_intent(&h, "acme", "op-unknown").await;
    let pending = h
        .enqueue(
            NewIntent::new("acme", "op-later", REFUND, json!({}))
                .with_not_before(Utc::now() + chrono::Duration::hours(1)),
        )
        .await;
    let pruned = h
        .store
        .prune_finished(Utc::now() + chrono::Duration::days(1), Utc::now(), 100)
        .await
        .unwrap();
    assert_eq!(pruned, 0);
    assert!(h.store.get_intent(intent_id).await.unwrap().is_some());
    assert!(h
        .store
        .get_intent(pending.intent_id)
        .await
        .unwrap()
        .is_some());
}

/// A pending intent waiting to retry after an ambiguous attempt cannot be cancelled: it
/// may have happened, and cancelling would hide that.
async fn cancel_refuses_an_intent_that_may_have_acted(t: &TestDb) {
    let h = Harness::new(t).await;
    let r = h.enqueue_simple("op-amb", REFUND).await;
    h.provider.push_fault(FaultRule {
        matcher: Matcher::Key(r.idempotency_key.clone()),
        fault: Fault::Status500AfterApply,
        times: 1,
    });
    h.dispatcher.run_once().await.unwrap();
    assert_eq!(h.intent(r.intent_id).await.state, IntentState::Pending);
    let cancel = Cancellation {
        intent_id: r.intent_id,
        scope: TenantScope::All,
        actor: "ops".into(),
        note: "stop".into(),
        now: Utc::now(),
        seen_attempt_count: None,
    };
    let err = h.store.cancel_intent(&cancel).await.unwrap_err();
    assert!(
        err.to_string().contains("may have reached the provider"),
        "{err}"
    );
    assert_eq!(h.intent(r.intent_id).await.state, IntentState::Pending);
}

both_backends!(
    cancel_refuses_an_intent_that_may_have_acted,
    resolve_as_delivered_records_reference_and_audit,
    redispatch_sends_again_with_the_same_key,
    abandon_is_terminal,
    concurrent_resolutions_have_one_winner,
    scopes_hide_other_tenants,
    resolutions_need_a_note_and_a_reference,
    cancel_only_pending,
    pruning_keeps_tombstones_that_answer_late_enqueues,
    unfinished_intents_are_never_pruned,
);
