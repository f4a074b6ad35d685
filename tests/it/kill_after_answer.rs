//! SIGKILL right after a 200: the real `outboxd` binary delivers to the fake provider one
//! request at a time (`max_in_flight = 1`, 100 ms per answer) and is killed the moment the
//! provider has written its eighth answer (the provider's response hook, no sleep). The
//! pipeline group-commits each outcome within milliseconds of its answer, so every answer
//! but the last one or two (one waiting for the writer, and a commit in progress) is
//! already recorded `delivered` with its reference when the process dies; a design that
//! wrote outcomes only when a batch ended would lose all eight. After a restart, what was
//! lost is settled by the rules: a keyed intent is resent with the same key (the provider
//! applies it once), a `not_idempotent` one goes to reconciliation as unknown; the
//! checker's invariants hold. On both backends.

use crate::support;

use std::time::Duration;

use outboxd::checker::check;
use outboxd::fake_provider::{FakeProvider, FakeProviderOptions};
use outboxd::intent::IntentState;
use outboxd::NewIntent;
use serde_json::json;
use support::daemon::{wait_settled, write_config, Daemon};
use support::harness::{enqueue_committed, test_actions, NOTIFY, REFUND};
use support::TestDb;

/// Answers written before the kill.
const ANSWERED: usize = 8;
/// Answers whose outcome the kill may take with it: one waiting for the writer (with one
/// request in flight at a time, one answer) and one more whose commit was under way.
const MAY_LOSE: usize = 2;

async fn answers_are_durable_within_a_window_of_a_sigkill(t: &TestDb) {
    let provider = FakeProvider::start(FakeProviderOptions::default()).unwrap();
    provider.set_latency(Duration::from_millis(100));
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "killed", &t.url, &provider);
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "allow_private_addresses = true",
        "allow_private_addresses = true\nmax_in_flight = 1",
    );
    std::fs::write(&config, text).unwrap();
    let mut ids = Vec::new();
    for i in 0..20 {
        let action = if i % 2 == 0 { REFUND } else { NOTIFY };
        let receipt = enqueue_committed(
            &t.db,
            NewIntent::new("acme", format!("op-{i}"), action, json!({"i": i})),
        )
        .await;
        ids.push(receipt.intent_id);
    }

    let daemon = Daemon::start(&config);
    assert!(
        provider
            .wait_for_responses_written(ANSWERED, Duration::from_secs(60))
            .await,
        "the daemon never got {ANSWERED} answers"
    );
    daemon.kill_hard();
    let written = provider.responses_written();

    // What the provider answered with a 200 (each effect is one answered, applied request;
    // max_in_flight = 1 means at most one more was in flight when the kill came).
    let store = t.db.store();
    let answered = provider.effects();
    assert!(answered.len() >= ANSWERED, "{} effects", answered.len());
    let mut unrecorded = Vec::new();
    for effect in &answered {
        let intent = store
            .list_intents(&outboxd::store::IntentFilter {
                limit: 100,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_iter()
            .find(|i| Some(i.idempotency_key.as_str()) == effect.key.as_deref())
            .expect("every effect belongs to an intent");
        if intent.state == IntentState::Delivered {
            assert_eq!(
                intent.provider_ref.as_deref(),
                Some(effect.reference.as_str()),
                "recorded with the provider's reference"
            );
        } else {
            unrecorded.push(intent.id);
        }
    }
    // An effect applied but not yet answered at the kill was never received.
    let unanswered = answered.len().saturating_sub(written);
    assert!(
        unrecorded.len() <= MAY_LOSE + unanswered,
        "{} of {} answered intents were not durable at the kill ({unrecorded:?}); only the \
         last answer or two may be lost ({written} answers written)",
        unrecorded.len(),
        answered.len()
    );

    provider.set_latency(Duration::ZERO);
    let mut restarted = Daemon::start(&config);
    let settled = wait_settled(&t.db, Duration::from_secs(60)).await;
    restarted.assert_running("restarted daemon");
    assert!(restarted.terminate(), "graceful stop after settling");
    assert!(settled, "the outbox did not settle after the restart");
    let actions = test_actions(&provider, Duration::from_secs(24 * 3600));
    let report = check(store.as_ref(), &provider, &actions, true)
        .await
        .unwrap();
    assert!(report.is_clean(), "{report}");
    for id in unrecorded {
        let row = store.get_intent(id).await.unwrap().unwrap();
        assert!(
            matches!(row.state, IntentState::Delivered | IntentState::Unknown),
            "a lost outcome is resent with its key or sent to reconciliation: {row:?}"
        );
    }
}

both_backends!(answers_are_durable_within_a_window_of_a_sigkill);
