//! Leases on both backends: a request is sent only while its lease still covers the request
//! timeout with a margin, counted from before the claim waited for the database; lease
//! times come from the database's clock, never from a replica's; and an outcome recorded
//! after a takeover is fenced off.

use crate::support;

use std::time::Duration;

use chrono::Utc;
use outboxd::action::AttemptClass;
use outboxd::dispatch::Dispatcher;
use outboxd::fake_provider::{Fault, FaultRule, Matcher};
use outboxd::intent::IntentState;
use outboxd::store::{ClaimRequest, Database};
use support::harness::{exec, test_settings, Harness, NOTIFY, REFUND};
use support::invariants::assert_invariants;
use support::TestDb;

/// Stalls every writer of `db` for `stall`, starting now: another connection holds the
/// write lock (SQLite: `BEGIN IMMEDIATE`; PostgreSQL: `outbox_intents` locked in `EXCLUSIVE`
/// mode, which a claim's row locks wait for, `SKIP LOCKED` or not). The returned task ends
/// when the stall does.
async fn stall_writers(db: &Database, stall: Duration) -> tokio::task::JoinHandle<()> {
    match db {
        Database::Sqlite(pool) => {
            let mut conn = pool.acquire().await.unwrap();
            sqlx::query("BEGIN IMMEDIATE")
                .execute(&mut *conn)
                .await
                .unwrap();
            tokio::spawn(async move {
                tokio::time::sleep(stall).await;
                sqlx::query("ROLLBACK").execute(&mut *conn).await.unwrap();
            })
        }
        Database::Postgres(pool) => {
            let mut tx = pool.begin().await.unwrap();
            sqlx::query("LOCK TABLE outbox_intents IN EXCLUSIVE MODE")
                .execute(&mut *tx)
                .await
                .unwrap();
            tokio::spawn(async move {
                tokio::time::sleep(stall).await;
                tx.rollback().await.unwrap();
            })
        }
    }
}

/// A claim that waits for the database longer than the lease can spare is not sent: the
/// claim is handed back unsent (no request, no ambiguous attempt, pending again), and the
/// next claim, not stalled, sends it.
async fn claim_stalled_past_the_lease_margin_is_not_sent(t: &TestDb) {
    let h = Harness::new(t).await;
    let r = h.enqueue_simple("op-stalled", NOTIFY).await;
    let mut settings = test_settings("short-lease");
    // 700 ms request timeout + 1 s margin: a claim may wait at most 300 ms to send. The
    // stall ends well before PostgreSQL's deadline for the claim (half the lease), which
    // would cancel it instead (`a_claim_behind_a_lock_is_cancelled_by_the_server_…`).
    settings.lease = Duration::from_secs(2);
    let dispatcher = Dispatcher::new(h.db.claim_store(), h.actions.clone(), settings);
    let stall = stall_writers(&h.db, Duration::from_millis(650)).await;
    let step = dispatcher.claim_and_deliver().await.unwrap();
    stall.await.unwrap();
    assert_eq!((step.claimed, step.released), (1, 1), "{step:?}");
    assert_eq!(h.provider.request_count_for_key(&r.idempotency_key), 0);
    let row = h.intent(r.intent_id).await;
    assert_eq!(
        (row.state, row.ambiguous_attempts),
        (IntentState::Pending, 0)
    );
    let attempts = h.store.list_attempts(r.intent_id).await.unwrap();
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert_eq!(attempts[0].class, Some(AttemptClass::NotSent));
    assert!(
        attempts[0].error.as_deref().unwrap_or("").contains("lease"),
        "{attempts:?}"
    );

    let step = dispatcher.claim_and_deliver().await.unwrap();
    assert_eq!(step.delivered, 1, "{step:?}");
    assert_eq!(h.provider.request_count_for_key(&r.idempotency_key), 1);
    assert_invariants(&h).await;
}

/// SQLite: a claim that waits for the write lock longer than the lease is given up on by
/// the claimer (no server-side deadline here; the busy timeout is 10 s), goes on, and
/// commits once the lock is free; what it claimed is then handed back unsent (a `not_sent`
/// attempt, pending again, nothing sent, nothing ambiguous), and the next claim sends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_claim_given_up_on_is_handed_back_when_it_commits() {
    let t = TestDb::sqlite().await;
    let h = Harness::new(&t).await;
    let r = h.enqueue_simple("op-given-up", NOTIFY).await;
    let mut settings = test_settings("given-up");
    let lease = Duration::from_secs(3);
    settings.lease = lease;
    let dispatcher = Dispatcher::new(h.db.claim_store(), h.actions.clone(), settings);
    // Past the lease, and well within the claim's further lease in its own task.
    let stall = stall_writers(&h.db, lease + Duration::from_millis(1500)).await;
    let err = dispatcher
        .claim_and_deliver()
        .await
        .expect_err("a claim behind the write lock cannot have answered within the lease");
    assert!(err.to_string().contains("did not answer"), "{err}");
    stall.await.unwrap();
    let handed_back = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let attempts = h.store.list_attempts(r.intent_id).await.unwrap();
            if attempts
                .iter()
                .any(|a| a.class == Some(AttemptClass::NotSent))
            {
                return attempts;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the late claim was not handed back");
    assert_eq!(handed_back.len(), 1, "{handed_back:?}");
    let row = h.intent(r.intent_id).await;
    assert_eq!(
        (row.state, row.ambiguous_attempts),
        (IntentState::Pending, 0)
    );
    assert_eq!(h.provider.request_count_for_key(&r.idempotency_key), 0);
    let step = dispatcher.claim_and_deliver().await.unwrap();
    assert_eq!(step.delivered, 1, "{step:?}");
    assert_invariants(&h).await;
}

fn replica(owner: &str, lease: Duration, h: &Harness, skew: chrono::Duration) -> ClaimRequest {
    ClaimRequest {
        owner: owner.into(),
        lease,
        limit: 10,
        actions: h.actions.names(),
        now: Utc::now() + skew,
    }
}

/// Replicas whose clocks are wrong by minutes: one behind writes a lease that is live by
/// the database's clock (not one already expired), one ahead neither takes that live lease
/// over nor writes a lease minutes too long. The claim returns the lease as written.
async fn skewed_replica_clock_does_not_decide_leases(t: &TestDb) {
    let h = Harness::new(t).await;
    let first = h.enqueue_simple("op-skew-1", REFUND).await;
    // Due even by the clock of a replica ten minutes behind.
    exec(
        &h.db,
        "UPDATE outbox_intents SET next_attempt_at = 0",
        "UPDATE outbox_intents SET next_attempt_at = now() - interval '1 hour'",
    )
    .await;
    let (lease, skew) = (Duration::from_secs(30), chrono::Duration::minutes(10));
    let behind = replica("behind", lease, &h, -skew);
    let claimed = h.store.claim_due(&behind).await.unwrap();
    assert_eq!(claimed.len(), 1);
    let live = |at: chrono::DateTime<Utc>| {
        let now = Utc::now();
        at > now + chrono::Duration::seconds(25) && at <= now + chrono::Duration::seconds(31)
    };
    let expires = h.intent(first.intent_id).await.lease_expires_at.unwrap();
    assert!(
        live(expires),
        "lease written as {expires}, now {}",
        Utc::now()
    );
    assert_eq!(claimed[0].lease_expires_at, expires);

    let ahead = replica("ahead", lease, &h, skew);
    let taken = h.store.reclaim_expired(&ahead).await.unwrap();
    assert!(taken.is_empty(), "a live lease was taken over: {taken:?}");
    let row = h.intent(first.intent_id).await;
    assert_eq!(row.lease_owner.as_deref(), Some("behind"));

    let second = h.enqueue_simple("op-skew-2", REFUND).await;
    assert_eq!(h.store.claim_due(&ahead).await.unwrap().len(), 1);
    let expires = h.intent(second.intent_id).await.lease_expires_at.unwrap();
    assert!(
        live(expires),
        "lease written as {expires}, now {}",
        Utc::now()
    );
}

/// Through the dispatcher's own record path: an outcome that arrives after its lease was
/// taken over is not written. The takeover bumped the fencing token, so the late write is
/// refused (counted as fenced) however long it was retried, and the new owner's decision
/// stands; one effect in the end.
async fn late_outcome_after_takeover_is_fenced(t: &TestDb) {
    let h = Harness::new(t).await;
    let r = h.enqueue_simple("op-late-outcome", REFUND).await;
    h.provider.push_fault(FaultRule {
        matcher: Matcher::Key(r.idempotency_key.clone()),
        fault: Fault::SleepAfterApply(Duration::from_millis(400)),
        times: 1,
    });
    let stalled = h.second_dispatcher("stalled");
    let taker = h.second_dispatcher("taker");
    let (late, takeover) = tokio::join!(stalled.run_once(), async {
        assert!(
            h.provider
                .wait_for_requests(1, Duration::from_secs(5))
                .await
        );
        // The stalled dispatcher's lease lapses while its response is on the way.
        h.expire_leases().await;
        taker.run_once().await
    });
    let (late, takeover) = (late.unwrap(), takeover.unwrap());
    assert_eq!((late.claimed, late.fenced), (1, 1), "{late:?}");
    assert_eq!(takeover.reclaimed, 1, "{takeover:?}");
    let attempts = h.store.list_attempts(r.intent_id).await.unwrap();
    assert_eq!(
        attempts[0].class,
        Some(AttemptClass::Ambiguous),
        "{attempts:?}"
    );
    assert!(
        !attempts
            .iter()
            .any(|a| a.owner == "stalled" && a.class == Some(AttemptClass::Delivered)),
        "the late outcome was written: {attempts:?}"
    );
    h.make_due().await;
    taker.drain().await.unwrap();
    assert_eq!(h.intent(r.intent_id).await.state, IntentState::Delivered);
    assert_eq!(h.provider.effects_for_key(&r.idempotency_key).len(), 1);
    assert_invariants(&h).await;
}

both_backends!(
    claim_stalled_past_the_lease_margin_is_not_sent,
    skewed_replica_clock_does_not_decide_leases,
    late_outcome_after_takeover_is_fenced,
);

/// The daemon's PostgreSQL sessions end a transaction left idle (a process stopped inside
/// one would otherwise hold row locks that `SKIP LOCKED` claims and takeovers step around).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dispatcher_sessions_end_transactions_left_idle() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let db = outboxd::store::connect_dispatcher(&t.url, 2).await.unwrap();
    let Database::Postgres(pool) = &db else {
        unreachable!()
    };
    let setting: String = sqlx::query_scalar("SHOW idle_in_transaction_session_timeout")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(setting, "15s");
}
