//! Where a person's "send it even though it may act twice" lives: on the intent, recorded by
//! the store's redispatch for the first attempt after it. The dispatcher exempts that one
//! attempt from the send-time resend rule only when the confirmation is recorded, never
//! because its own rule happened to see a risk at the moment of the redispatch. So a
//! redispatch through a CLI whose configuration says the provider keeps keys much longer
//! (no confirmation asked) is not sent by a daemon whose rule says the key may be
//! forgotten; a confirmed one is sent once; and a confirmation does not carry over to a
//! later redispatch that nobody confirmed.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use outboxd::dispatch::Dispatcher;
use outboxd::fake_provider::{Fault, FaultRule, Matcher};
use outboxd::intent::{IntentId, IntentState};
use outboxd::store::{ResendApproval, Resolution, ResolutionKind, TenantScope};
use support::harness::{test_actions, test_settings, Harness, REFUND};
use support::invariants::assert_invariants;
use support::TestDb;

/// How long the CLI's configuration says the provider keeps keys (the daemon's: 1 ms).
const CLI_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);

/// A keyed intent whose every attempt answered `500` after the provider applied it: its
/// budget spent, `unknown`, in reconciliation. Dispatched by `h` (24 h key retention).
async fn keyed_unknown(h: &Harness, op: &str) -> (IntentId, String) {
    let r = h.enqueue_simple(op, REFUND).await;
    h.provider.push_fault(FaultRule {
        matcher: Matcher::Key(r.idempotency_key.clone()),
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
    (r.intent_id, r.idempotency_key)
}

/// The daemon: the same provider, whose keys it believes are forgotten after 1 ms.
fn strict_daemon(h: &Harness) -> Dispatcher {
    let actions = Arc::new(test_actions(&h.provider, Duration::from_millis(1)));
    Dispatcher::new(h.db.claim_store(), actions, test_settings("daemon"))
}

/// Resolves the intent's open item as `redispatch` as the CLI would, with the CLI's
/// configuration (keys kept for [`CLI_RETENTION`]): by that rule nothing may act twice.
async fn redispatch_from_cli(h: &Harness, intent: IntentId, confirmed: bool) {
    let items = h.store.reconciliation_for_intent(intent).await.unwrap();
    let item = items.iter().find(|i| i.resolved_at.is_none()).unwrap().id;
    let cli_policies = test_actions(&h.provider, CLI_RETENTION).resend_policies();
    let resolution = Resolution {
        item_id: item,
        scope: TenantScope::All,
        kind: ResolutionKind::Redispatch,
        actor: "ops-alice".into(),
        note: "the customer never got it".into(),
        now: chrono::Utc::now(),
        resend: ResendApproval {
            policies: Arc::new(cli_policies),
            confirmed_may_act_twice: confirmed,
        },
        seen_attempt_count: None,
    };
    h.store
        .resolve_reconciliation(&resolution)
        .await
        .expect("by the CLI's rule no confirmation is needed");
    assert_eq!(h.intent(intent).await.state, IntentState::Pending);
}

async fn an_unconfirmed_redispatch_the_daemon_finds_risky_is_not_sent(t: &TestDb) {
    let h = Harness::new(t).await;
    let (intent, key) = keyed_unknown(&h, "op-cli-resend").await;
    let requests = h.provider.request_count_for_key(&key);
    redispatch_from_cli(&h, intent, false).await;

    strict_daemon(&h).drain().await.unwrap();
    assert_eq!(
        h.provider.request_count_for_key(&key),
        requests,
        "resent although nobody confirmed it may act twice"
    );
    let row = h.intent(intent).await;
    assert_eq!(row.state, IntentState::Unknown, "{row:?}");
    assert!(
        row.last_error
            .as_deref()
            .is_some_and(|e| e.contains("may have forgotten the idempotency key")),
        "{row:?}"
    );
    assert_eq!(h.open_items(intent).await, 1);
}

async fn a_confirmed_redispatch_is_sent_once(t: &TestDb) {
    let h = Harness::new(t).await;
    let (intent, key) = keyed_unknown(&h, "op-cli-confirmed").await;
    let requests = h.provider.request_count_for_key(&key);
    redispatch_from_cli(&h, intent, true).await;

    let daemon = strict_daemon(&h);
    daemon.drain().await.unwrap();
    assert_eq!(h.intent(intent).await.state, IntentState::Delivered);
    h.make_due().await;
    daemon.drain().await.unwrap();
    assert_eq!(h.provider.request_count_for_key(&key), requests + 1);
    assert_eq!(assert_invariants(&h).await.duplicated, 0);
}

/// A confirmed redispatch whose one attempt is ambiguous again, then a second redispatch
/// nobody confirmed: the first confirmation does not cover the second resend.
async fn a_confirmation_covers_only_its_own_redispatch(t: &TestDb) {
    let h = Harness::new(t).await;
    let (intent, key) = keyed_unknown(&h, "op-cli-twice").await;
    redispatch_from_cli(&h, intent, true).await;
    h.provider.push_fault(FaultRule {
        matcher: Matcher::Key(key.clone()),
        fault: Fault::Status500AfterApply,
        times: 1,
    });
    let daemon = strict_daemon(&h);
    daemon.drain().await.unwrap();
    assert_eq!(h.intent(intent).await.state, IntentState::Unknown);
    let requests = h.provider.request_count_for_key(&key);

    redispatch_from_cli(&h, intent, false).await;
    daemon.drain().await.unwrap();
    assert_eq!(h.provider.request_count_for_key(&key), requests, "resent");
    assert_eq!(h.intent(intent).await.state, IntentState::Unknown);
}

both_backends!(
    an_unconfirmed_redispatch_the_daemon_finds_risky_is_not_sent,
    a_confirmed_redispatch_is_sent_once,
    a_confirmation_covers_only_its_own_redispatch
);
