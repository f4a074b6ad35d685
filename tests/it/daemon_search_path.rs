//! The daemon's own statements on PostgreSQL against functions and operators planted in a
//! schema its sessions search (outboxd's own, here): each call whose built-in does not fit
//! its arguments exactly names `pg_catalog` or casts to the built-in's types, so a plant
//! that fits better never runs inside a claim, a takeover, an outcome write, a release,
//! the retention job, the job and gauge locks, the gauge read, the outbox schema and
//! privilege look-ups or the wake-up of the dispatchers; and the advisory lock
//! keys are the ones earlier releases took, so a replica of each excludes the other.

use crate::support;
use sqlx::AssertSqlSafe;

use std::time::Duration;

use chrono::Utc;
use outboxd::dispatch::Dispatcher;
use outboxd::intent::IntentState;
use outboxd::reconcile::{run_retention_once, Job, JobLock, RetentionSettings};
use outboxd::store::{ClaimRequest, Database, GaugeRead, Release};
use support::harness::{scalar, test_settings, Harness, REFUND};
use support::TestDb;

/// Plants that fit the daemon's unqualified calls better than the built-ins do: a
/// `unnest(text[])` for `unnest(anyarray)`, a `hashtext(name)` for `hashtext(text)` called
/// with `current_schema()`, an operator `float8 / int4` for a division by an integer
/// literal, a `make_interval(float8)` beside the built-in with defaults, an operator
/// `oid = regclass` for a comparison with `to_regclass(…)` and an operator `oid = int4` for
/// a `CASE` on an oid with an integer literal. Each notes its call and then does what the
/// built-in would.
const PLANTS: [&str; 10] = [
    "CREATE TABLE planted_calls (f text)",
    "CREATE FUNCTION unnest(a text[]) RETURNS SETOF text LANGUAGE plpgsql AS \
     $$ BEGIN INSERT INTO planted_calls VALUES ('unnest(text[])'); \
     RETURN QUERY SELECT * FROM pg_catalog.unnest(a); END $$",
    "CREATE FUNCTION hashtext(n name) RETURNS int LANGUAGE plpgsql AS \
     $$ BEGIN INSERT INTO planted_calls VALUES ('hashtext(name)'); \
     RETURN pg_catalog.hashtext(n::text); END $$",
    "CREATE FUNCTION planted_div(a float8, b int4) RETURNS float8 LANGUAGE plpgsql AS \
     $$ BEGIN INSERT INTO planted_calls VALUES ('float8 / int4'); \
     RETURN a OPERATOR(pg_catalog./) b::float8; END $$",
    "CREATE OPERATOR / (leftarg = float8, rightarg = int4, function = planted_div)",
    "CREATE FUNCTION make_interval(secs float8) RETURNS interval LANGUAGE plpgsql AS \
     $$ BEGIN INSERT INTO planted_calls VALUES ('make_interval(float8)'); \
     RETURN pg_catalog.make_interval(secs => secs); END $$",
    "CREATE FUNCTION planted_oid_regclass(a oid, b regclass) RETURNS bool LANGUAGE plpgsql AS \
     $$ BEGIN INSERT INTO planted_calls VALUES ('oid = regclass'); \
     RETURN a OPERATOR(pg_catalog.=) b::oid; END $$",
    "CREATE OPERATOR = (leftarg = oid, rightarg = regclass, function = planted_oid_regclass)",
    "CREATE FUNCTION planted_oid_int4(a oid, b int4) RETURNS bool LANGUAGE plpgsql AS \
     $$ BEGIN INSERT INTO planted_calls VALUES ('oid = int4'); \
     RETURN a OPERATOR(pg_catalog.=) b::oid; END $$",
    "CREATE OPERATOR = (leftarg = oid, rightarg = int4, function = planted_oid_int4)",
];

async fn planted_calls(h: &Harness) -> Vec<String> {
    let Database::Postgres(pool) = &h.db else {
        unreachable!()
    };
    sqlx::query_scalar("SELECT DISTINCT f FROM planted_calls ORDER BY f")
        .fetch_all(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn functions_planted_in_the_schema_never_run_in_the_dispatchers_statements() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let h = Harness::new(&t).await;
    let Database::Postgres(pool) = &t.db else {
        unreachable!()
    };
    for sql in PLANTS {
        sqlx::query(AssertSqlSafe(sql)).execute(pool).await.unwrap();
    }
    // The plants do win the unqualified calls the daemon made before.
    sqlx::query(
        "SELECT (SELECT count(*) FROM unnest(ARRAY['a']::text[])), \
                hashtext(current_schema()), 5::double precision / 1000, \
                (SELECT count(*) FROM pg_class c WHERE c.oid = to_regclass('outbox_intents')), \
                CASE 0::oid WHEN 0 THEN 'PUBLIC' END",
    )
    .execute(pool)
    .await
    .unwrap();
    assert_eq!(
        planted_calls(&h).await,
        [
            "float8 / int4",
            "hashtext(name)",
            "oid = int4",
            "oid = regclass",
            "unnest(text[])"
        ]
    );
    sqlx::query("DELETE FROM planted_calls")
        .execute(pool)
        .await
        .unwrap();

    // A restarted daemon: new sessions, which resolve every statement with the plants in
    // place.
    let fresh = t.reopen(4).await;
    let store = fresh.store();
    let dispatcher = Dispatcher::new(fresh.claim_store(), h.actions.clone(), test_settings("p"));
    let delivered = h.enqueue_simple("op-delivered", REFUND).await;
    dispatcher.drain().await.unwrap();
    assert_eq!(
        h.intent(delivered.intent_id).await.state,
        IntentState::Delivered
    );

    let taken_over = h.enqueue_simple("op-taken-over", REFUND).await;
    let request = ClaimRequest {
        owner: "planted-a".into(),
        lease: Duration::from_secs(30),
        limit: 10,
        actions: h.actions.names(),
        now: Utc::now(),
    };
    let claimed = store.claim_due(&request).await.unwrap();
    assert_eq!(claimed.len(), 1);
    h.expire_leases().await;
    let request = ClaimRequest {
        owner: "planted-b".into(),
        ..request
    };
    let taken = store.reclaim_expired(&request).await.unwrap();
    assert_eq!(taken.len(), 1);
    store
        .release_claims(
            &[Release {
                intent_id: taken_over.intent_id,
                fencing_token: taken[0].fencing_token,
                reason: "test hands it back".into(),
            }],
            Utc::now(),
        )
        .await
        .unwrap();
    assert_eq!(
        h.intent(taken_over.intent_id).await.state,
        IntentState::Pending
    );

    let settings = RetentionSettings {
        finished_after: Duration::ZERO,
        tombstone_after: Duration::from_secs(86_400),
        batch_size: 100,
        batch_pause: Duration::ZERO,
        vacuum: true,
    };
    run_retention_once(
        store.as_ref(),
        &settings,
        Utc::now() + chrono::Duration::seconds(1),
    )
    .await
    .unwrap();
    assert_eq!(
        scalar(&h.db, "SELECT count(*) FROM outbox_tombstones").await,
        1,
        "the delivered intent was pruned"
    );
    let lock = JobLock::try_acquire(&fresh, Job::Retention)
        .await
        .unwrap()
        .expect("the lock is free");
    lock.release().await.unwrap();
    assert!(matches!(
        store.live_gauges(Utc::now()).await.unwrap(),
        GaugeRead::Read(_)
    ));
    // What a daemon reads at start and a review change sends: the outbox's schema, the
    // roles that may create objects in it, the wake-up of every dispatcher.
    assert!(fresh.outbox_schema().await.unwrap().is_some());
    let Database::Postgres(fresh_pool) = &fresh else {
        unreachable!()
    };
    sqlx::query(
        "DO $$ BEGIN EXECUTE pg_catalog.format('GRANT CREATE ON SCHEMA %I TO PUBLIC', \
         pg_catalog.current_schema()); END $$",
    )
    .execute(fresh_pool)
    .await
    .unwrap();
    assert_eq!(fresh.schema_creators().await.unwrap(), ["PUBLIC"]);
    sqlx::query(outboxd::store::postgres::WAKE_DISPATCHERS_SQL)
        .execute(fresh_pool)
        .await
        .unwrap();

    assert_eq!(
        planted_calls(&h).await,
        Vec::<String>::new(),
        "a planted function ran inside the daemon's statements"
    );
}

/// The job lock's key is the one earlier releases computed with an unqualified
/// `hashtext(current_schema())`: a session holding that key keeps this release's job
/// from starting, so replicas of two releases never run a job at once during an upgrade.
#[tokio::test]
async fn the_job_lock_key_is_the_one_of_earlier_releases() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let old_replica = t.reopen(1).await;
    let Database::Postgres(old_pool) = &old_replica else {
        unreachable!()
    };
    let mut old_session = old_pool.acquire().await.unwrap();
    let held: bool =
        sqlx::query_scalar("SELECT pg_try_advisory_lock($1, hashtext(current_schema()))")
            .bind(0x6f62_7802_i32)
            .fetch_one(&mut *old_session)
            .await
            .unwrap();
    assert!(held);
    assert!(
        JobLock::try_acquire(&t.db, Job::Retention)
            .await
            .unwrap()
            .is_none(),
        "a replica of this release took the retention job held by an earlier one"
    );
    let _: bool = sqlx::query_scalar("SELECT pg_advisory_unlock($1, hashtext(current_schema()))")
        .bind(0x6f62_7802_i32)
        .fetch_one(&mut *old_session)
        .await
        .unwrap();
    let lock = JobLock::try_acquire(&t.db, Job::Retention)
        .await
        .unwrap()
        .expect("free once the earlier release lets go");
    lock.release().await.unwrap();
}
