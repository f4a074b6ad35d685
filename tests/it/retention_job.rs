//! The retention job (`run_retention_once`, the scheduled job and its advisory lock) on
//! both backends: old finished intents are pruned in batches with tombstones; recent,
//! unknown and pending intents are kept; a late enqueue is answered from the tombstone
//! (replay or conflict) and never reaches the provider again; tombstones expire after their
//! own window; with PostgreSQL a second concurrent run skips while another session holds
//! the job's lock.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use outboxd::config::Config;
use outboxd::fake_provider::{Fault, FaultRule, Matcher};
use outboxd::intent::IntentState;
use outboxd::reconcile::{
    run_probe_job, run_retention_job, run_retention_job_reporting, run_retention_observed,
    run_retention_once, Job, JobLock, JobRun, ProbeSettings, RetentionBatch, RetentionSettings,
    ScheduledJobs,
};
use outboxd::store::Database;
use outboxd::{EnqueueError, NewIntent};
use serde_json::json;
use support::harness::{exec, operation, scalar, tenant, Harness, NOTIFY, REFUND};
use support::TestDb;

const DAY: Duration = Duration::from_secs(86_400);

fn settings(batch_size: u32) -> RetentionSettings {
    RetentionSettings {
        finished_after: 7 * DAY,
        tombstone_after: 400 * DAY,
        batch_size,
        batch_pause: Duration::ZERO,
    }
}

/// Moves the finish (and enqueue) time of intents whose operation id starts with `prefix`
/// 30 days into the past.
async fn age_30_days(db: &Database, prefix: &str) {
    exec(
        db,
        &format!(
            "UPDATE outbox_intents SET finished_at = finished_at - 2592000000, \
                  created_at = created_at - 2592000000 WHERE operation_id LIKE '{prefix}%'"
        ),
        &format!(
            "UPDATE outbox_intents SET finished_at = finished_at - interval '30 days', \
                  created_at = created_at - interval '30 days' WHERE operation_id LIKE '{prefix}%'"
        ),
    )
    .await;
}

fn refund(op: &str, amount: i64) -> NewIntent {
    NewIntent::new("acme", op, REFUND, json!({"amount": amount}))
}

/// Enqueues an intent in the given end state: three old delivered, one old failed, one
/// recent delivered, one unknown, one pending.
async fn populate(h: &Harness) {
    for op in ["old-1", "old-2", "old-3", "recent-1"] {
        h.enqueue(refund(op, 5)).await;
    }
    let failed = h.enqueue(refund("old-failed", 5)).await;
    h.provider.push_fault(FaultRule {
        matcher: Matcher::Key(failed.idempotency_key),
        fault: Fault::StatusWithoutApply {
            status: 400,
            retry_after: None,
        },
        times: 1,
    });
    let unknown = h
        .enqueue(NewIntent::new("acme", "old-unknown", NOTIFY, json!({})))
        .await;
    h.provider.push_fault(FaultRule {
        matcher: Matcher::Key(unknown.idempotency_key),
        fault: Fault::LoseResponseAfterApply,
        times: 1,
    });
    h.dispatcher.drain().await.unwrap();
    h.enqueue(refund("old-pending", 5).with_not_before(Utc::now() + chrono::Duration::hours(1)))
        .await;
    age_30_days(&h.db, "old-").await;
}

async fn state_of(h: &Harness, op: &str) -> Option<IntentState> {
    h.store
        .find_intent(&tenant("acme"), &operation(op))
        .await
        .unwrap()
        .map(|i| i.state)
}

/// The tombstone of `op` (tenant `acme`), if any.
async fn tombstone(h: &Harness, op: &str) -> Option<outboxd::store::Tombstone> {
    h.store
        .find_tombstone(&tenant("acme"), &operation(op))
        .await
        .unwrap()
}

async fn prunes_old_finished_intents_and_keeps_the_rest(t: &TestDb) {
    let h = Harness::new(t).await;
    populate(&h).await;
    let old_1 = h
        .store
        .find_intent(&tenant("acme"), &operation("old-1"))
        .await
        .unwrap()
        .unwrap();
    let unknown = h
        .store
        .find_intent(&tenant("acme"), &operation("old-unknown"))
        .await
        .unwrap()
        .unwrap();
    let report = run_retention_once(h.store.as_ref(), &settings(2), Utc::now())
        .await
        .unwrap();
    // 4 prunable with batches of 2: 2, 2, then an empty batch.
    assert_eq!(
        (report.intents_pruned, report.batches),
        (4, 3),
        "{report:?}"
    );
    assert_eq!(report.tombstones_pruned, 0);
    for op in ["old-1", "old-2", "old-3", "old-failed"] {
        assert_eq!(state_of(&h, op).await, None, "{op} pruned");
    }
    for (op, state) in [
        ("recent-1", IntentState::Delivered),
        ("old-unknown", IntentState::Unknown),
        ("old-pending", IntentState::Pending),
    ] {
        assert_eq!(state_of(&h, op).await, Some(state), "{op} kept");
    }
    assert_eq!(
        h.open_items(unknown.id).await,
        1,
        "its reconciliation item stays"
    );
    let tomb = tombstone(&h, "old-1").await.expect("tombstone");
    assert_eq!(
        (tomb.intent_id, tomb.final_state.as_str(), tomb.provider_ref),
        (old_1.id, "delivered", old_1.provider_ref)
    );
    assert_eq!(
        tombstone(&h, "old-failed").await.unwrap().final_state,
        "failed"
    );
    // Nothing left: one empty batch.
    let again = run_retention_once(h.store.as_ref(), &settings(2), Utc::now())
        .await
        .unwrap();
    assert_eq!((again.intents_pruned, again.batches), (0, 1));
    // 371 days on, the 30-day-old tombstones pass their 400-day window; the recent intent
    // is pruned now and its fresh tombstone kept.
    let later = Utc::now() + chrono::Duration::days(371);
    let report = run_retention_once(h.store.as_ref(), &settings(1000), later)
        .await
        .unwrap();
    assert_eq!(
        (report.intents_pruned, report.tombstones_pruned),
        (1, 4),
        "{report:?}"
    );
    assert!(tombstone(&h, "old-1").await.is_none());
    assert!(tombstone(&h, "recent-1").await.is_some());
    assert_eq!(
        state_of(&h, "old-unknown").await,
        Some(IntentState::Unknown)
    );
}

async fn late_enqueues_after_pruning_are_answered_from_tombstones(t: &TestDb) {
    let h = Harness::new(t).await;
    populate(&h).await;
    let old_1 = h
        .store
        .find_intent(&tenant("acme"), &operation("old-1"))
        .await
        .unwrap()
        .unwrap();
    run_retention_once(h.store.as_ref(), &settings(1000), Utc::now())
        .await
        .unwrap();
    assert_eq!(state_of(&h, "old-1").await, None);
    // A late retry is answered from the tombstone and never reaches the provider.
    let (requests, effects) = (h.provider.request_count(), h.provider.effects().len());
    let late = h.enqueue(refund("old-1", 5)).await;
    assert!(late.replayed);
    assert_eq!(
        (late.intent_id, late.state),
        (old_1.id, IntentState::Delivered)
    );
    let failed = h.enqueue(refund("old-failed", 5)).await;
    assert_eq!((failed.replayed, failed.state), (true, IntentState::Failed));
    h.dispatcher.drain().await.unwrap();
    assert_eq!(
        h.provider.request_count(),
        requests,
        "no second provider request"
    );
    assert_eq!(state_of(&h, "old-1").await, None, "no new intent row");
    // Different arguments under a pruned operation id: conflict, nothing recorded.
    let err = match &h.db {
        Database::Postgres(pool) => {
            outboxd::enqueue(&mut pool.begin().await.unwrap(), refund("old-1", 6)).await
        }
        Database::Sqlite(pool) => {
            outboxd::enqueue(&mut pool.begin().await.unwrap(), refund("old-1", 6)).await
        }
    }
    .unwrap_err();
    assert!(matches!(err, EnqueueError::Conflict { .. }), "{err:?}");
    assert_eq!(state_of(&h, "old-1").await, None);
    assert_eq!(h.provider.effects().len(), effects, "no second effect");
}

async fn the_scheduler_runs_the_retention_job(t: &TestDb) {
    let h = Harness::new(t).await;
    h.enqueue(refund("done", 5)).await;
    h.dispatcher.drain().await.unwrap();
    let mut config = Config::default();
    config.retention.schedule = "* * * * * *".into();
    config.retention.finished_after = Duration::ZERO;
    let jobs = ScheduledJobs::start(&config, &h.db, Arc::clone(&h.actions))
        .await
        .expect("scheduler");
    // Wait (bounded) for the first tick to prune the delivered intent.
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    while scalar(&h.db, "SELECT count(*) FROM outbox_intents").await > 0 {
        assert!(
            tokio::time::Instant::now() < until,
            "no retention run within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    jobs.shutdown().await;
    assert!(h
        .store
        .find_tombstone(&tenant("acme"), &operation("done"))
        .await
        .unwrap()
        .is_some());
}

/// Tombstones expire in batches of `batch_size` too, and every batch of both kinds is
/// reported as it commits (what the progress counter and log lines are built from).
async fn tombstones_expire_in_batches_with_progress(t: &TestDb) {
    let h = Harness::new(t).await;
    for i in 0..5 {
        h.enqueue(refund(&format!("old-{i}"), 5)).await;
    }
    h.dispatcher.drain().await.unwrap();
    age_30_days(&h.db, "old-").await;
    let metrics = outboxd::metrics::Metrics::shared();
    let pruned = run_retention_job_reporting(&h.db, &settings(2), Some(&metrics))
        .await
        .unwrap();
    let JobRun::Ran(pruned) = pruned else {
        panic!("nobody else holds the lock")
    };
    assert_eq!(
        (pruned.intents_pruned, pruned.batches),
        (5, 3),
        "{pruned:?}"
    );
    let text = metrics.encode().unwrap();
    assert!(
        text.contains("outboxd_retention_deleted_total{kind=\"intents\"} 5"),
        "{text}"
    );
    let mut seen = Vec::new();
    let later = Utc::now() + chrono::Duration::days(371);
    let report =
        run_retention_observed(h.store.as_ref(), &settings(2), later, &mut |b| seen.push(b))
            .await
            .unwrap();
    assert_eq!(
        (report.tombstones_pruned, report.tombstone_batches),
        (5, 3),
        "{report:?}"
    );
    assert_eq!(
        seen,
        [
            RetentionBatch::Intents(0),
            RetentionBatch::Tombstones(2),
            RetentionBatch::Tombstones(2),
            RetentionBatch::Tombstones(1),
        ]
    );
    for i in 0..5 {
        assert!(tombstone(&h, &format!("old-{i}")).await.is_none());
    }
}

both_backends!(
    tombstones_expire_in_batches_with_progress,
    prunes_old_finished_intents_and_keeps_the_rest,
    late_enqueues_after_pruning_are_answered_from_tombstones,
    the_scheduler_runs_the_retention_job,
);

/// With PostgreSQL, a job whose advisory lock another session (another replica) holds is
/// skipped; the other job and other schemas are not blocked; after release it runs. A lock
/// whose holder vanishes (dropped without release) is freed with its session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advisory_lock_makes_a_concurrent_run_skip_on_postgres() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let h = Harness::new(&t).await;
    h.enqueue(refund("done", 5)).await;
    h.dispatcher.drain().await.unwrap();
    let prune_all = RetentionSettings {
        finished_after: Duration::ZERO,
        ..settings(1000)
    };
    let other_replica = t.reopen(2).await;
    let held = JobLock::try_acquire(&other_replica, Job::Retention)
        .await
        .unwrap()
        .expect("the lock is free");
    assert!(JobLock::try_acquire(&t.db, Job::Retention)
        .await
        .unwrap()
        .is_none());
    assert_eq!(
        run_retention_job(&t.db, &prune_all).await.unwrap(),
        JobRun::Skipped
    );
    assert!(
        state_of(&h, "done").await.is_some(),
        "the skipped run pruned nothing"
    );
    // The probe job has its own lock; another schema (another install) has its own keys.
    let probes = run_probe_job(&t.db, &h.actions, &ProbeSettings::default())
        .await
        .unwrap();
    assert!(matches!(probes, JobRun::Ran(_)), "{probes:?}");
    let other_install = TestDb::postgres().await.expect("postgres");
    let run = run_retention_job(&other_install.db, &prune_all)
        .await
        .unwrap();
    assert!(matches!(run, JobRun::Ran(_)), "{run:?}");

    held.release().await.unwrap();
    match run_retention_job(&t.db, &prune_all).await.unwrap() {
        JobRun::Ran(report) => assert_eq!(report.intents_pruned, 1),
        JobRun::Skipped => panic!("skipped after release"),
    }
    // A holder that disappears without releasing (a cancelled run) frees the lock: its
    // connection is closed, not returned to the pool holding it.
    drop(
        JobLock::try_acquire(&other_replica, Job::Retention)
            .await
            .unwrap()
            .expect("free"),
    );
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(lock) = JobLock::try_acquire(&t.db, Job::Retention).await.unwrap() {
            lock.release().await.unwrap();
            break;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "lock not freed by the closed session"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
