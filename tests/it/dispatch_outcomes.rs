//! The dispatcher against the fake provider, step by step, on both backends: every row of
//! the classification table ends where the design says, with the evidence recorded.

use crate::support;

use std::time::Duration;

use outboxd::action::AttemptClass;
use outboxd::fake_provider::{Fault, FaultRule, Matcher};
use outboxd::intent::{IntentId, IntentState};
use support::harness::{scalar, Harness, NOTIFY, REFUND};
use support::invariants::assert_invariants;
use support::kept_plans::{
    claim_one, claim_request, delivered, generic_plan_database, kept_statement,
    scans_after_the_table_grew,
};
use support::TestDb;

fn once_for(key: &str, fault: Fault) -> FaultRule {
    FaultRule {
        matcher: Matcher::Key(key.to_owned()),
        fault,
        times: 1,
    }
}

async fn classes(h: &Harness, id: IntentId) -> Vec<Option<AttemptClass>> {
    h.store
        .list_attempts(id)
        .await
        .unwrap()
        .iter()
        .map(|a| a.class)
        .collect()
}

/// Keyed action, response lost after the provider applied it: retried with the same key,
/// one effect, delivered with the provider's reference.
async fn keyed_lost_response_is_retried_with_the_same_key(t: &TestDb) {
    let h = Harness::new(t).await;
    let r = h.enqueue_simple("op-lost", REFUND).await;
    h.provider
        .push_fault(once_for(&r.idempotency_key, Fault::LoseResponseAfterApply));
    let step = h.dispatcher.run_once().await.unwrap();
    assert_eq!((step.claimed, step.retried), (1, 1), "{step:?}");
    assert_eq!(h.intent(r.intent_id).await.state, IntentState::Pending);
    h.make_due().await;
    let step = h.dispatcher.run_once().await.unwrap();
    assert_eq!(step.delivered, 1, "{step:?}");
    let row = h.intent(r.intent_id).await;
    assert_eq!(row.state, IntentState::Delivered);
    assert_eq!(h.provider.effects_for_key(&r.idempotency_key).len(), 1);
    assert_eq!(h.provider.request_count_for_key(&r.idempotency_key), 2);
    assert_eq!(
        row.provider_ref,
        h.provider.reference_for_key(&r.idempotency_key)
    );
    assert_eq!(
        classes(&h, r.intent_id).await,
        vec![Some(AttemptClass::Ambiguous), Some(AttemptClass::Delivered)]
    );
    assert_invariants(&h).await;
}

/// Not-idempotent action, timeout after the provider applied it: exactly one request, the
/// intent waits in reconciliation, and later steps never resend it.
async fn not_idempotent_timeout_goes_to_reconciliation(t: &TestDb) {
    let h = Harness::new(t).await;
    let r = h.enqueue_simple("op-timeout", NOTIFY).await;
    h.provider.push_fault(once_for(
        &r.idempotency_key,
        Fault::SleepAfterApply(Duration::from_secs(3)),
    ));
    let step = h.dispatcher.run_once().await.unwrap();
    assert_eq!(step.unknown, 1, "{step:?}");
    let row = h.intent(r.intent_id).await;
    assert_eq!(row.state, IntentState::Unknown);
    assert_eq!(h.open_items(r.intent_id).await, 1);
    h.make_due().await;
    let more = h.dispatcher.drain().await.unwrap();
    assert_eq!(more.claimed, 0);
    assert_eq!(h.provider.request_count_for_key(&r.idempotency_key), 1);
    assert_eq!(
        classes(&h, r.intent_id).await,
        vec![Some(AttemptClass::Ambiguous)]
    );
    assert_invariants(&h).await;
}

/// Not-idempotent action, connection reset / 500 after apply: also reconciliation, one request.
async fn not_idempotent_reset_and_500_go_to_reconciliation(t: &TestDb) {
    let h = Harness::new(t).await;
    let reset = h.enqueue_simple("op-reset", NOTIFY).await;
    let five = h.enqueue_simple("op-500", NOTIFY).await;
    h.provider
        .push_fault(once_for(&reset.idempotency_key, Fault::ResetAfterApply));
    h.provider
        .push_fault(once_for(&five.idempotency_key, Fault::Status500AfterApply));
    h.dispatcher.drain().await.unwrap();
    for r in [&reset, &five] {
        assert_eq!(h.intent(r.intent_id).await.state, IntentState::Unknown);
        assert_eq!(h.provider.request_count_for_key(&r.idempotency_key), 1);
    }
    assert_invariants(&h).await;
}

/// Connection refused is provably not sent: retried even for a not-idempotent action, then
/// delivered once the provider is back, with one request in total.
async fn connection_refused_is_retried_even_when_not_idempotent(t: &TestDb) {
    let h = Harness::new(t).await;
    let r = h.enqueue_simple("op-refused", NOTIFY).await;
    h.provider.set_refusing(true).await.unwrap();
    let step = h.dispatcher.run_once().await.unwrap();
    assert_eq!(step.retried, 1, "{step:?}");
    assert_eq!(
        classes(&h, r.intent_id).await,
        vec![Some(AttemptClass::NotSent)]
    );
    h.provider.set_refusing(false).await.unwrap();
    h.make_due().await;
    h.dispatcher.run_once().await.unwrap();
    let row = h.intent(r.intent_id).await;
    assert_eq!(row.state, IntentState::Delivered);
    assert_eq!(h.provider.request_count_for_key(&r.idempotency_key), 1);
    assert_eq!(h.provider.effects_for_key(&r.idempotency_key).len(), 1);
    assert_invariants(&h).await;
}

/// 429 and 503 with Retry-After: the next attempt is not scheduled earlier than it says.
async fn retry_after_is_honoured(t: &TestDb) {
    let h = Harness::new(t).await;
    let a = h.enqueue_simple("op-429", REFUND).await;
    let b = h.enqueue_simple("op-503", NOTIFY).await;
    let wait = |status| Fault::StatusWithoutApply {
        status,
        retry_after: Some("30".to_owned()),
    };
    h.provider
        .push_fault(once_for(&a.idempotency_key, wait(429)));
    h.provider
        .push_fault(once_for(&b.idempotency_key, wait(503)));
    let before = chrono::Utc::now();
    let step = h.dispatcher.run_once().await.unwrap();
    assert_eq!(step.retried, 2, "{step:?}");
    for r in [&a, &b] {
        let row = h.intent(r.intent_id).await;
        assert_eq!(row.state, IntentState::Pending);
        assert!(
            row.next_attempt_at >= before + chrono::Duration::seconds(30),
            "{}",
            row.next_attempt_at
        );
    }
    // Not due yet: a step sends nothing.
    assert_eq!(h.dispatcher.run_once().await.unwrap().claimed, 0);
    assert_eq!(
        classes(&h, b.intent_id).await,
        vec![Some(AttemptClass::Retryable)]
    );
    h.make_due().await;
    h.dispatcher.drain().await.unwrap();
    assert_eq!(h.intent(b.intent_id).await.state, IntentState::Delivered);
    assert_eq!(h.provider.effects_for_key(&b.idempotency_key).len(), 1);
    assert_invariants(&h).await;
}

/// 400 is a permanent refusal: failed after one request, never retried.
async fn bad_request_fails_without_retry(t: &TestDb) {
    let h = Harness::new(t).await;
    let r = h.enqueue_simple("op-400", REFUND).await;
    h.provider.push_fault(FaultRule {
        matcher: Matcher::Key(r.idempotency_key.clone()),
        fault: Fault::StatusWithoutApply {
            status: 400,
            retry_after: None,
        },
        times: 10,
    });
    h.dispatcher.drain().await.unwrap();
    h.make_due().await;
    h.dispatcher.drain().await.unwrap();
    let row = h.intent(r.intent_id).await;
    assert_eq!(row.state, IntentState::Failed);
    assert_eq!(row.last_http_status, Some(400));
    assert_eq!(h.provider.request_count_for_key(&r.idempotency_key), 1);
    assert_invariants(&h).await;
}

/// A garbage 2xx body may mean it acted: keyed → retried with the same key and delivered
/// with the reference the provider replays.
async fn garbage_success_body_is_ambiguous(t: &TestDb) {
    let h = Harness::new(t).await;
    let r = h.enqueue_simple("op-garbage", REFUND).await;
    h.provider
        .push_fault(once_for(&r.idempotency_key, Fault::GarbageBodyAfterApply));
    h.dispatcher.run_once().await.unwrap();
    assert_eq!(
        classes(&h, r.intent_id).await,
        vec![Some(AttemptClass::Ambiguous)]
    );
    h.make_due().await;
    h.dispatcher.drain().await.unwrap();
    let row = h.intent(r.intent_id).await;
    assert_eq!(row.state, IntentState::Delivered);
    assert_eq!(
        row.provider_ref,
        h.provider.reference_for_key(&r.idempotency_key)
    );
    assert_eq!(h.provider.effects_for_key(&r.idempotency_key).len(), 1);
    assert_invariants(&h).await;
}

/// Key retention: a keyed action whose key the provider may have forgotten is not resent
/// after an ambiguous attempt; it goes to reconciliation.
async fn keyed_outside_retention_goes_to_reconciliation(t: &TestDb) {
    let h = Harness::with_retention(t, Duration::ZERO).await;
    let r = h.enqueue_simple("op-retention", REFUND).await;
    h.provider
        .push_fault(once_for(&r.idempotency_key, Fault::Status500AfterApply));
    h.dispatcher.drain().await.unwrap();
    assert_eq!(h.intent(r.intent_id).await.state, IntentState::Unknown);
    assert_eq!(h.provider.request_count_for_key(&r.idempotency_key), 1);
    assert_invariants(&h).await;
}

/// A zombie whose lease expired cannot overwrite what the new owner recorded.
async fn zombie_cannot_overwrite_new_owner(t: &TestDb) {
    let h = Harness::new(t).await;
    let r = h.enqueue_simple("op-zombie", REFUND).await;
    // The zombie claims and stalls (no outcome recorded).
    let zombie_claim = h
        .store
        .claim_due(&claim_request(
            "zombie",
            Duration::from_secs(5),
            10,
            h.actions.names(),
        ))
        .await
        .unwrap();
    assert_eq!(zombie_claim.len(), 1);
    h.expire_leases().await;
    let b = h.second_dispatcher("dispatcher-b");
    let step = b.run_once().await.unwrap();
    assert_eq!(step.reclaimed, 1, "{step:?}");
    h.make_due().await;
    b.drain().await.unwrap();
    let delivered = h.intent(r.intent_id).await;
    assert_eq!(delivered.state, IntentState::Delivered);
    // The zombie wakes up and tries to record a failure with its stale token.
    let stale = outboxd::store::OutcomeRecord {
        intent_id: r.intent_id,
        fencing_token: zombie_claim[0].fencing_token,
        attempt: None,
        transition: outboxd::store::Transition::Failed {
            reason: "zombie".into(),
        },
        now: chrono::Utc::now(),
    };
    let result = h.store.record_outcomes(&[stale]).await.unwrap();
    assert_eq!(result, vec![outboxd::store::RecordResult::Fenced]);
    let after = h.intent(r.intent_id).await;
    assert_eq!(
        (after.state, after.provider_ref),
        (IntentState::Delivered, delivered.provider_ref)
    );
    assert_invariants(&h).await;
}

/// A not-idempotent intent whose lease expired mid-attempt is not resent.
async fn expired_lease_of_not_idempotent_goes_to_reconciliation(t: &TestDb) {
    let h = Harness::new(t).await;
    let r = h.enqueue_simple("op-expired", NOTIFY).await;
    let claim = claim_request("died", Duration::from_secs(5), 10, h.actions.names());
    assert_eq!(h.store.claim_due(&claim).await.unwrap().len(), 1);
    h.expire_leases().await;
    let step = h.dispatcher.drain().await.unwrap();
    assert_eq!(
        (step.reclaimed, step.unknown, step.claimed),
        (1, 1, 0),
        "{step:?}"
    );
    assert_eq!(h.intent(r.intent_id).await.state, IntentState::Unknown);
    assert_eq!(h.provider.request_count_for_key(&r.idempotency_key), 0);
    assert_eq!(
        classes(&h, r.intent_id).await,
        vec![Some(AttemptClass::Ambiguous)]
    );
}

/// The attempt a claim opens is shown while open (from the intent row), written once when
/// its lease lapses, and never again by a takeover of the takeover; the next real attempt
/// gets the next number.
async fn open_attempt_is_listed_and_written_once(t: &TestDb) {
    let h = Harness::new(t).await;
    let r = h.enqueue_simple("op-open-attempt", REFUND).await;
    let request = |owner: &str| claim_request(owner, Duration::from_secs(5), 10, h.actions.names());
    assert_eq!(h.store.claim_due(&request("died")).await.unwrap().len(), 1);
    let in_flight = h.intent(r.intent_id).await;
    assert!(in_flight.attempt_started_at.is_some());
    let open = h.store.list_attempts(r.intent_id).await.unwrap();
    assert_eq!(open.len(), 1, "{open:?}");
    assert_eq!(
        (open[0].id, open[0].attempt_number, open[0].owner.as_str()),
        (0, 1, "died")
    );
    assert!(open[0].ended_at.is_none() && open[0].class.is_none());
    assert_eq!(
        scalar(&h.db, "SELECT count(*) FROM outbox_attempts").await,
        0,
        "no row until the attempt ends"
    );

    // The lease lapses: the takeover writes the open attempt as ambiguous.
    h.expire_leases().await;
    assert_eq!(
        h.store
            .reclaim_expired(&request("taker"))
            .await
            .unwrap()
            .len(),
        1
    );
    let taken = h.intent(r.intent_id).await;
    assert_eq!(
        (taken.attempt_started_at, taken.ambiguous_attempts),
        (None, 1)
    );
    let after_takeover = h.store.list_attempts(r.intent_id).await.unwrap();
    assert_eq!(after_takeover.len(), 1, "{after_takeover:?}");
    assert_eq!(after_takeover[0].class, Some(AttemptClass::Ambiguous));
    assert_eq!(after_takeover[0].owner, "died");
    assert!(after_takeover[0].id > 0 && after_takeover[0].ended_at.is_some());

    // The taker dies too before deciding: its takeover opened no attempt, so the next
    // takeover writes nothing and counts nothing; the dispatcher then retries (keyed).
    h.expire_leases().await;
    h.dispatcher.drain().await.unwrap();
    h.make_due().await;
    h.dispatcher.drain().await.unwrap();
    let done = h.intent(r.intent_id).await;
    assert_eq!(
        (done.state, done.ambiguous_attempts),
        (IntentState::Delivered, 1)
    );
    let history = h.store.list_attempts(r.intent_id).await.unwrap();
    let summary: Vec<_> = history
        .iter()
        .map(|a| (a.attempt_number, a.class))
        .collect();
    assert_eq!(
        summary,
        vec![
            (1, Some(AttemptClass::Ambiguous)),
            (2, Some(AttemptClass::Delivered))
        ]
    );
    assert_eq!(h.provider.request_count_for_key(&r.idempotency_key), 1);
    assert_invariants(&h).await;
}

/// A claim handed back unsent (shutdown) goes back to pending with its attempt written as
/// `not_sent`; a release under a stale token changes nothing and writes no attempt.
async fn release_writes_the_opened_attempt_as_not_sent(t: &TestDb) {
    let h = Harness::new(t).await;
    let r = h.enqueue_simple("op-release", NOTIFY).await;
    let request =
        |owner: &str| claim_request(owner, Duration::from_secs(30), 10, h.actions.names());
    let claim = h.store.claim_due(&request("stopping")).await.unwrap();
    assert_eq!(claim.len(), 1);
    let release = |token: i64| outboxd::store::Release {
        intent_id: r.intent_id,
        fencing_token: token,
        reason: "released unsent".into(),
    };
    h.store
        .release_claims(&[release(claim[0].fencing_token)], chrono::Utc::now())
        .await
        .unwrap();
    let back = h.intent(r.intent_id).await;
    assert_eq!(back.state, IntentState::Pending);
    assert_eq!(
        (back.attempt_started_at, back.lease_expires_at),
        (None, None)
    );
    let history = h.store.list_attempts(r.intent_id).await.unwrap();
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(
        (
            history[0].attempt_number,
            history[0].class,
            history[0].owner.as_str()
        ),
        (1, Some(AttemptClass::NotSent), "stopping")
    );

    // Claimed again by someone else: the first claim's token no longer releases anything.
    let again = h.store.claim_due(&request("next")).await.unwrap();
    assert_eq!(again.len(), 1);
    h.store
        .release_claims(&[release(claim[0].fencing_token)], chrono::Utc::now())
        .await
        .unwrap();
    let held = h.intent(r.intent_id).await;
    assert_eq!(held.state, IntentState::InFlight);
    assert_eq!(held.lease_owner.as_deref(), Some("next"));
    assert_eq!(
        scalar(&h.db, "SELECT count(*) FROM outbox_attempts").await,
        1
    );
    assert_eq!(h.provider.request_count_for_key(&r.idempotency_key), 0);
}

/// Intents sharing an ordering key are attempted strictly in enqueue order; a later one
/// waits while an earlier one is unfinished.
async fn ordering_key_preserves_enqueue_order(t: &TestDb) {
    let h = Harness::new(t).await;
    let mut receipts = Vec::new();
    for i in 0..6 {
        let intent = outboxd::NewIntent::new(
            "acme",
            format!("op-ord-{i}"),
            REFUND,
            serde_json::json!({"i": i}),
        )
        .with_ordering_key("customer-7");
        receipts.push(h.enqueue(intent).await);
    }
    h.provider.push_fault(once_for(
        &receipts[0].idempotency_key,
        Fault::StatusWithoutApply {
            status: 503,
            retry_after: Some("0".into()),
        },
    ));
    let step = h.dispatcher.run_once().await.unwrap();
    assert_eq!(
        step.claimed, 1,
        "only the head of the chain is claimable: {step:?}"
    );
    assert_eq!(
        h.provider
            .request_count_for_key(&receipts[1].idempotency_key),
        0
    );
    h.make_due().await;
    h.dispatcher.drain().await.unwrap();
    let order: Vec<String> = h
        .provider
        .effects()
        .iter()
        .filter_map(|e| e.key.clone())
        .collect();
    let expected: Vec<String> = receipts.iter().map(|r| r.idempotency_key.clone()).collect();
    assert_eq!(order, expected);
    assert_invariants(&h).await;
}

/// An intent for an action that is not configured waits, visible, and is not dropped.
async fn unconfigured_action_waits(t: &TestDb) {
    let h = Harness::new(t).await;
    let r = h.enqueue_simple("op-mystery", "mystery_action").await;
    h.dispatcher.drain().await.unwrap();
    assert_eq!(h.intent(r.intent_id).await.state, IntentState::Pending);
    let waiting = h
        .store
        .pending_unconfigured_actions(&h.actions.names())
        .await
        .unwrap();
    assert_eq!(waiting, vec![("mystery_action".to_owned(), 1)]);
    assert_eq!(h.provider.request_count(), 0);
}

/// A keyed retry claimed after the provider may have forgotten the key (a backlog, a
/// stopped daemon) is not sent: the retention is re-checked at send time.
async fn late_keyed_retry_is_not_sent_after_key_retention(t: &TestDb) {
    let h = Harness::new(t).await;
    let r = h.enqueue_simple("op-late", REFUND).await;
    h.provider
        .push_fault(once_for(&r.idempotency_key, Fault::Status500AfterApply));
    assert_eq!(h.dispatcher.run_once().await.unwrap().retried, 1);
    // The retry is claimed two days after the first request instead of right away.
    support::harness::exec(
        &h.db,
        "UPDATE outbox_intents SET first_sent_at = first_sent_at - 172800000",
        "UPDATE outbox_intents SET first_sent_at = first_sent_at - interval '2 days'",
    )
    .await;
    h.make_due().await;
    let step = h.dispatcher.run_once().await.unwrap();
    assert_eq!((step.claimed, step.unknown), (1, 1), "{step:?}");
    assert_eq!(h.intent(r.intent_id).await.state, IntentState::Unknown);
    assert_eq!(
        h.provider.request_count_for_key(&r.idempotency_key),
        1,
        "not resent"
    );
    assert_eq!(
        classes(&h, r.intent_id).await,
        vec![Some(AttemptClass::Ambiguous), Some(AttemptClass::NotSent)]
    );
    assert_invariants(&h).await;
}

/// What a retried outcome write reads to tell an outcome an earlier try recorded from a
/// lost lease: each intent's fencing token now and whether it is in flight. A recorded
/// outcome keeps the claim's token and ends the flight; a takeover bumps the token.
async fn fencing_now_tells_a_recorded_outcome_from_a_takeover(t: &TestDb) {
    let h = Harness::new(t).await;
    let a = h.enqueue_simple("op-fence-a", REFUND).await;
    let b = h.enqueue_simple("op-fence-b", REFUND).await;
    let claimed = h
        .store
        .claim_due(&claim_request(
            "first",
            Duration::from_secs(30),
            10,
            h.actions.names(),
        ))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    let token = |id: IntentId| {
        claimed
            .iter()
            .find(|c| c.id == id)
            .expect("claimed")
            .fencing_token
    };
    let ids = [a.intent_id, b.intent_id, IntentId::new(i64::MAX)];
    let mut now = h.store.fencing_now(&ids).await.unwrap();
    now.sort();
    assert_eq!(
        now,
        vec![
            (a.intent_id, token(a.intent_id), true),
            (b.intent_id, token(b.intent_id), true)
        ]
    );
    let first = claimed.iter().find(|c| c.id == a.intent_id).unwrap();
    h.store.record_outcomes(&[delivered(first)]).await.unwrap();
    h.expire_leases().await;
    let taken = h
        .store
        .reclaim_expired(&claim_request(
            "second",
            Duration::from_secs(30),
            10,
            h.actions.names(),
        ))
        .await
        .unwrap();
    assert_eq!(taken.len(), 1, "{taken:?}");
    let mut now = h.store.fencing_now(&ids).await.unwrap();
    now.sort();
    assert_eq!(now[0], (a.intent_id, token(a.intent_id), false), "recorded");
    assert_eq!(now[1].0, b.intent_id);
    assert_ne!(now[1].1, token(b.intent_id), "taken over: {now:?}");
}

both_backends!(
    fencing_now_tells_a_recorded_outcome_from_a_takeover,
    late_keyed_retry_is_not_sent_after_key_retention,
    keyed_lost_response_is_retried_with_the_same_key,
    not_idempotent_timeout_goes_to_reconciliation,
    not_idempotent_reset_and_500_go_to_reconciliation,
    connection_refused_is_retried_even_when_not_idempotent,
    retry_after_is_honoured,
    bad_request_fails_without_retry,
    garbage_success_body_is_ambiguous,
    keyed_outside_retention_goes_to_reconciliation,
    zombie_cannot_overwrite_new_owner,
    expired_lease_of_not_idempotent_goes_to_reconciliation,
    open_attempt_is_listed_and_written_once,
    release_writes_the_opened_attempt_as_not_sent,
    ordering_key_preserves_enqueue_order,
    unconfigured_action_waits,
);

/// PostgreSQL: a claim skips rows another transaction holds locked instead of waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_skips_locked_rows() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let h = Harness::new(&t).await;
    for i in 0..10 {
        h.enqueue_simple(&format!("op-lock-{i}"), REFUND).await;
    }
    let outboxd::store::Database::Postgres(pool) = &t.db else {
        unreachable!()
    };
    let mut locker = pool.begin().await.unwrap();
    let locked: Vec<IntentId> =
        sqlx::query_scalar("SELECT id FROM outbox_intents ORDER BY id LIMIT 4 FOR UPDATE")
            .fetch_all(&mut *locker)
            .await
            .unwrap();
    let claim = claim_request("skipper", Duration::from_secs(5), 100, h.actions.names());
    let claimed = tokio::time::timeout(Duration::from_secs(5), h.store.claim_due(&claim))
        .await
        .expect("the claim must not wait for the locked rows")
        .unwrap();
    let ids: Vec<IntentId> = claimed.iter().map(|c| c.id).collect();
    assert_eq!(ids.len(), 6);
    assert!(ids.iter().all(|id| !locked.contains(id)));
    locker.rollback().await.unwrap();
}

/// PostgreSQL: a connection that first claimed and wrote outcomes while the table was nearly
/// empty still looks intents up by id after the table grew (no ANALYZE in between). The
/// claim and the outcome group are kept prepared (decisions 0021 and 0022), and their plans
/// made on the small table must not scan; the rarer statements that join the table to a
/// list of ids (takeover, release) are not kept as prepared statements, whose cached plan
/// from the small table scanned the whole table on every execution. This is the store any
/// tool gets; the dispatcher's own is tested by
/// `dispatcher_sessions_do_not_scan_a_table_that_grew`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcome_write_does_not_scan_a_table_that_grew() {
    let Some((_t, pool, db)) = generic_plan_database().await else {
        return;
    };
    let store = db.store();
    let scans = scans_after_the_table_grew(&db, &pool, &store, || async {}).await;
    assert!(
        scans < 3,
        "10 claims and outcome writes scanned the grown table {scans} times"
    );

    // The release and the takeover are not kept prepared.
    support::harness::enqueue_committed(
        &db,
        outboxd::NewIntent::new(
            "acme",
            "op-release",
            REFUND,
            serde_json::json!({"amount": 100}),
        ),
    )
    .await;
    let claimed = store
        .claim_due(&claim_one("planner", Duration::from_secs(30)))
        .await
        .unwrap();
    let release = outboxd::store::Release {
        intent_id: claimed[0].id,
        fencing_token: claimed[0].fencing_token,
        reason: "test".into(),
    };
    store
        .release_claims(&[release], chrono::Utc::now())
        .await
        .unwrap();
    store
        .claim_due(&claim_one("planner", Duration::from_secs(30)))
        .await
        .unwrap();
    // Expired by hand: a claim leased for a millisecond would also get a millisecond's
    // statement_timeout (half its lease) and could be cancelled on a busy machine.
    sqlx::raw_sql(
        "UPDATE outbox_intents SET lease_expires_at = now() - interval '1 second' \
         WHERE state = 'in_flight'",
    )
    .execute(&pool)
    .await
    .unwrap();
    let taken = store
        .reclaim_expired(&claim_one("planner-2", Duration::from_secs(30)))
        .await
        .unwrap();
    assert_eq!(taken.len(), 1);
    let prepared: Vec<String> = sqlx::query_scalar("SELECT statement FROM pg_prepared_statements")
        .fetch_all(&pool)
        .await
        .unwrap();
    // The claim and the outcome group are kept prepared on purpose (decisions 0021 and
    // 0022): their plans are the generic ones made on the small table, and the scans
    // counted above show they still seek by index.
    let kept = |s: &String| kept_statement(s);
    assert_eq!(
        prepared.iter().filter(|s| kept(s)).count(),
        2,
        "the claim and the outcome group are not both kept prepared, so this test did not run their kept plans: {prepared:?}"
    );
    assert!(
        !prepared.iter().any(|s| !kept(s)
            && (s.contains("FOR UPDATE SKIP LOCKED") || s.contains("INSERT INTO outbox_attempts"))),
        "a takeover or release joining the table to a list of ids is kept prepared: {prepared:?}"
    );
    let mode: String = sqlx::query_scalar("SELECT current_setting('plan_cache_mode')")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        mode, "force_generic_plan",
        "the test's own setting took effect"
    );
}
