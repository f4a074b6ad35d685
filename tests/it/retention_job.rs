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
use outboxd::store::{Database, PrunedTable};
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
        vacuum: true,
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

/// Inserts `n` delivered intents of window `w`, finished (and enqueued) at `at`, as the
/// dispatcher leaves them.
async fn insert_window(db: &Database, w: usize, n: usize, at: chrono::DateTime<Utc>) {
    let ms = at.timestamp_millis();
    let ts = at.to_rfc3339();
    exec(
        db,
        &format!(
            "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < {n}) \
             INSERT INTO outbox_intents (tenant, operation_id, action, payload, payload_sha256, \
             idempotency_key, state, next_attempt_at, created_at, updated_at, finished_at, \
             attempt_count) SELECT 'acme', 'w{w}-' || n, '{REFUND}', \
             json_object('n', n, 'note', hex(zeroblob(100))), printf('%064d', n), \
             'key-w{w}-' || n, 'delivered', {ms}, {ms}, {ms}, {ms}, 1 FROM g"
        ),
        &format!(
            "INSERT INTO outbox_intents (tenant, operation_id, action, payload, payload_sha256, \
             idempotency_key, state, next_attempt_at, created_at, updated_at, finished_at, \
             attempt_count) SELECT 'acme', 'w{w}-' || g, '{REFUND}', \
             jsonb_build_object('n', g, 'note', repeat('0', 200)), repeat('0', 64), \
             'key-w{w}-' || g, 'delivered', '{ts}', '{ts}', '{ts}', '{ts}', 1 \
             FROM generate_series(1, {n}) g"
        ),
    )
    .await;
}

/// Bytes of `outbox_intents` with its indexes (PostgreSQL: with TOAST too).
async fn intents_size(db: &Database) -> i64 {
    match db {
        Database::Postgres(_) => {
            scalar(db, "SELECT pg_total_relation_size('outbox_intents')").await
        }
        Database::Sqlite(_) => {
            scalar(
                db,
                "SELECT sum(pgsize) FROM dbstat WHERE name IN \
                 (SELECT name FROM sqlite_master WHERE tbl_name = 'outbox_intents')",
            )
            .await
        }
    }
}

/// Steady load over six retention windows, each window's rows pruned one window later by
/// the pass as shipped (`retention.vacuum` on): the table with its indexes never exceeds
/// 1.5x its size after the first prune. On PostgreSQL that is the pass's VACUUM (without
/// it the table grows by a window each time, about 2.8x here, unless autovacuum happens
/// to wake in between); on SQLite freed pages are reused and nothing runs. PostgreSQL runs
/// it in a database of its own: in the shared one, other tests' open transactions keep
/// the VACUUM from removing rows they might still see.
async fn keeps_the_table_flat_over_windows(t: &TestDb) {
    const ROWS: usize = 1500;
    let store = t.db.store();
    let settings = RetentionSettings {
        finished_after: Duration::from_secs(3600),
        batch_size: 100,
        ..settings(100)
    };
    let t0 = Utc::now() - chrono::Duration::days(1);
    let mut sizes = Vec::new();
    for w in 0..6 {
        let at = t0 + chrono::Duration::hours(w as i64);
        insert_window(&t.db, w, ROWS, at).await;
        let report =
            run_retention_once(store.as_ref(), &settings, at + chrono::Duration::seconds(1))
                .await
                .unwrap();
        let expected = if w == 0 { 0 } else { ROWS as u64 };
        assert_eq!(report.intents_pruned, expected, "window {w}: {report:?}");
        match (t.backend(), w) {
            (_, 0) => assert!(report.vacuumed.is_empty(), "nothing pruned: {report:?}"),
            ("postgres", _) => assert_eq!(
                report.vacuumed,
                [
                    PrunedTable::Intents,
                    PrunedTable::Attempts,
                    PrunedTable::ReconciliationItems
                ],
                "{report:?}"
            ),
            _ => assert!(report.vacuumed.is_empty(), "{report:?}"),
        }
        sizes.push(intents_size(&t.db).await);
    }
    let most = sizes[2..].iter().copied().max().unwrap_or_default();
    let ratio = most as f64 / sizes[1] as f64;
    assert!(
        ratio <= 1.5,
        "outbox_intents grew to {ratio:.2}x over four more windows: {sizes:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pass_keeps_the_table_flat_on_sqlite() {
    keeps_the_table_flat_over_windows(&TestDb::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pass_keeps_the_table_flat_on_postgres() {
    let Some(t) = TestDb::postgres_own_database().await else {
        return;
    };
    keeps_the_table_flat_over_windows(&t).await;
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

/// A database role that may not vacuum the tables (it neither owns them nor the database)
/// still prunes: the pass reports nothing vacuumed (a warning is logged) and succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_that_may_not_vacuum_still_prunes_on_postgres() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let h = Harness::new(&t).await;
    h.enqueue(refund("done", 5)).await;
    h.dispatcher.drain().await.unwrap();
    let Database::Postgres(pool) = &t.db else {
        unreachable!("postgres")
    };
    let schema: String = sqlx::query_scalar("SELECT current_schema()::text")
        .fetch_one(pool)
        .await
        .unwrap();
    // Roles are the server's; this one is shared by every run and has no login.
    for sql in [
        "DO $$ BEGIN CREATE ROLE outboxd_it_not_owner NOLOGIN; \
         EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$"
            .to_owned(),
        format!("GRANT USAGE ON SCHEMA {schema} TO outboxd_it_not_owner"),
        format!(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} \
             TO outboxd_it_not_owner"
        ),
        format!("GRANT USAGE ON ALL SEQUENCES IN SCHEMA {schema} TO outboxd_it_not_owner"),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(pool)
            .await
            .unwrap();
    }
    let restricted = t.pool_as_role("outboxd_it_not_owner", 2).await;
    let db = Database::Postgres(restricted);
    let prune_all = RetentionSettings {
        finished_after: Duration::ZERO,
        ..settings(1000)
    };
    let report = run_retention_once(db.store().as_ref(), &prune_all, Utc::now())
        .await
        .unwrap();
    assert_eq!(report.intents_pruned, 1, "{report:?}");
    assert!(report.vacuumed.is_empty(), "{report:?}");
    assert!(state_of(&h, "done").await.is_none(), "pruned");
    db.close().await;
}
