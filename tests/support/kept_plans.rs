//! The dispatcher's two kept statements (the claim and the outcome group, decisions 0021
//! and 0022) under test: claim requests and delivered outcomes written by hand, a
//! PostgreSQL pool on which every prepared statement keeps its first plan, and the count of
//! sequential scans those plans make once the table grew.

use std::time::Duration;

use outboxd::action::AttemptClass;

use super::harness::REFUND;
use super::TestDb;

/// A claim request of `limit` intents of `actions` for `owner`, now.
pub fn claim_request(
    owner: &str,
    lease: Duration,
    limit: u32,
    actions: Vec<String>,
) -> outboxd::store::ClaimRequest {
    outboxd::store::ClaimRequest {
        owner: owner.into(),
        lease,
        limit,
        actions,
        now: chrono::Utc::now(),
    }
}

/// Sequential scans of `outbox_intents` counted by PostgreSQL's statistics for this test's
/// schema, after the one backend of `pool` flushed its own counts (PostgreSQL 15+).
pub async fn seq_scans_flushed(pool: &sqlx::PgPool) -> i64 {
    sqlx::query("SELECT pg_stat_force_next_flush()")
        .execute(pool)
        .await
        .unwrap();
    sqlx::query_scalar(
        "SELECT seq_scan FROM pg_stat_user_tables \
         WHERE schemaname = current_schema() AND relname = 'outbox_intents'",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

/// A claim request of one refund intent for `owner`, now.
pub fn claim_one(owner: &str, lease: Duration) -> outboxd::store::ClaimRequest {
    claim_request(owner, lease, 1, vec![REFUND.to_owned()])
}

/// `c` delivered now, with a reference.
pub fn delivered(c: &outboxd::store::ClaimedIntent) -> outboxd::store::OutcomeRecord {
    use outboxd::store::{AttemptRecord, OutcomeRecord, Transition};
    let now = chrono::Utc::now();
    OutcomeRecord {
        intent_id: c.id,
        fencing_token: c.fencing_token,
        attempt: Some(AttemptRecord {
            class: AttemptClass::Delivered,
            http_status: Some(200),
            error: None,
            provider_ref: Some("ref".into()),
            duration: Duration::from_millis(1),
            started_at: now,
        }),
        transition: Transition::Delivered {
            provider_ref: Some("ref".into()),
        },
        now,
    }
}

/// One claim of one intent and its delivered outcome, on `store`.
pub async fn claim_and_deliver(store: &std::sync::Arc<dyn outboxd::store::OutboxStore>) {
    use outboxd::store::RecordResult;
    let claimed = store
        .claim_due(&claim_one("planner", Duration::from_secs(30)))
        .await
        .unwrap();
    let c = claimed.first().expect("one due intent");
    let recorded = store.record_outcomes(&[delivered(c)]).await.unwrap();
    assert_eq!(recorded, vec![RecordResult::Recorded]);
}

/// A one-connection pool on `t` on which every prepared statement runs on the plan made at
/// its first execution (`plan_cache_mode = force_generic_plan`), with autovacuum off on
/// `outbox_intents` so no ANALYZE refreshes a cached plan; `None` where PostgreSQL is
/// older than 15 (no `pg_stat_force_next_flush`, said loudly).
///
/// Under the default (`auto`) PostgreSQL settles on a cached plan only sometimes (when its
/// estimated cost is no higher than the custom plans'; what was left to prune on the
/// table's pages decides), so without the setting a kept statement failed these tests
/// about once in seven suite runs.
pub async fn generic_plan_pool(t: &TestDb) -> Option<sqlx::PgPool> {
    // Exactly one backend, so one plan cache and one source of statistics.
    let options: sqlx::postgres::PgConnectOptions = t.url.parse().unwrap();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options.options([("plan_cache_mode", "force_generic_plan")]))
        .await
        .unwrap();
    let version: i32 = sqlx::query_scalar("SELECT current_setting('server_version_num')::int")
        .fetch_one(&pool)
        .await
        .unwrap();
    if version < 150_000 {
        // Fails in CI (CI=true or OUTBOXD_REQUIRE_POSTGRES=1) and unless OUTBOXD_ALLOW_SKIP=1.
        super::db::skip_or_fail(&format!(
            "PostgreSQL {version} is older than 15 (no pg_stat_force_next_flush)"
        ));
        return None;
    }
    sqlx::query("ALTER TABLE outbox_intents SET (autovacuum_enabled = off)")
        .execute(&pool)
        .await
        .unwrap();
    Some(pool)
}

/// A PostgreSQL test database (kept alive by the first value) reached through
/// [`generic_plan_pool`]; `None` where there is none or it is too old (said loudly).
pub async fn generic_plan_database() -> Option<(TestDb, sqlx::PgPool, outboxd::store::Database)> {
    let t = TestDb::postgres().await?;
    let pool = generic_plan_pool(&t).await?;
    let db = outboxd::store::Database::Postgres(pool.clone());
    Some((t, pool, db))
}

/// Claims and delivers 8 intents on `store` while the table is nearly empty (past the five
/// executions after which PostgreSQL may settle on a cached plan), grows the table by
/// 20,000 finished rows, then returns how many sequential scans of `outbox_intents` 10 more
/// claims and outcome writes made. `flush` makes every other session that ran them report
/// its statistics.
pub async fn scans_after_the_table_grew<F, Fut>(
    db: &outboxd::store::Database,
    pool: &sqlx::PgPool,
    store: &std::sync::Arc<dyn outboxd::store::OutboxStore>,
    flush: F,
) -> i64
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let enqueue = |op: String| {
        super::harness::enqueue_committed(
            db,
            outboxd::NewIntent::new("acme", op, REFUND, serde_json::json!({"amount": 100})),
        )
    };
    for i in 0..8 {
        enqueue(format!("op-warm-{i}")).await;
        claim_and_deliver(store).await;
    }
    sqlx::query(
        "INSERT INTO outbox_intents (tenant, operation_id, action, payload, state, finished_at) \
         SELECT 'history', 'op-' || g, 'refund', '{}', 'delivered', now() \
         FROM generate_series(1, 20000) g",
    )
    .execute(pool)
    .await
    .unwrap();
    for i in 0..10 {
        enqueue(format!("op-after-{i}")).await;
    }
    flush().await;
    let before = seq_scans_flushed(pool).await;
    for _ in 0..10 {
        claim_and_deliver(store).await;
    }
    flush().await;
    seq_scans_flushed(pool).await - before
}

/// Whether a prepared statement's text is the claim or the outcome group, the two
/// statements kept on their generic plans (decisions 0021 and 0022).
pub fn kept_statement(sql: &str) -> bool {
    sql.contains("WITH RECURSIVE after_turn")
        || sql.contains("UPDATE outbox_intents i\n    SET state = o.state")
}
