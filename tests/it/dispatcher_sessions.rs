//! The dispatcher's own PostgreSQL sessions for claims and outcome groups (decisions 0023
//! and 0024) and the deadlines around them: plans kept on a table that grew, sessions held,
//! replaced when broken, backed off when they cannot open; claims cancelled by the server
//! or given up on by the claimer (and their late answers handed back); outcome writes
//! given up on and written again. Faults come from a loopback [`Relay`] that freezes,
//! thaws or refuses connections.

use crate::support;

use std::time::Duration;

use support::harness::{scalar, REFUND};
use support::kept_plans::{
    claim_request, delivered, generic_plan_database, kept_statement, scans_after_the_table_grew,
};
use support::TestDb;

/// PostgreSQL: the dispatcher's store runs its claims and outcome groups on sessions of
/// their own, opened with the kept plans' settings (decision 0023), and those plans, made
/// while the table was nearly empty, still seek by index after it grew. Nothing of them
/// runs on the store's main pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dispatcher_sessions_do_not_scan_a_table_that_grew() {
    use outboxd::store::postgres::{DispatcherSessions, SessionRole};
    let Some((_t, pool, db)) = generic_plan_database().await else {
        return;
    };
    let kept = std::sync::Arc::new(DispatcherSessions::beside(&pool));
    let store: std::sync::Arc<dyn outboxd::store::OutboxStore> = std::sync::Arc::new(
        outboxd::store::postgres::PgStore::for_dispatcher(pool.clone(), kept.clone()),
    );
    // Each session in turn reports its statistics, and its statements are read.
    let sessions = || async {
        let mut seen = Vec::new();
        for role in [SessionRole::Claims, SessionRole::Outcomes] {
            let mut conn = kept
                .try_session(role)
                .await
                .unwrap()
                .expect("no statement runs now");
            let (seqscan, jit): (String, String) = sqlx::query_as(
                "SELECT current_setting('enable_seqscan'), current_setting('jit') \
                 FROM pg_stat_force_next_flush()",
            )
            .fetch_one(&mut *conn)
            .await
            .unwrap();
            assert_eq!((seqscan.as_str(), jit.as_str()), ("off", "off"));
            let statements: Vec<String> =
                sqlx::query_scalar("SELECT statement FROM pg_prepared_statements")
                    .fetch_all(&mut *conn)
                    .await
                    .unwrap();
            seen.extend(statements);
            conn.keep();
        }
        seen
    };
    let scans = scans_after_the_table_grew(&db, &pool, &store, || async {
        sessions().await;
    })
    .await;
    assert!(
        scans < 3,
        "10 claims and outcome writes on the dispatcher's sessions scanned the grown table {scans} times"
    );
    let on_kept = sessions().await;
    let claim = |s: &String| s.contains("WITH RECURSIVE after_turn");
    assert!(
        on_kept.iter().any(claim) && on_kept.iter().any(|s| kept_statement(s) && !claim(s)),
        "the claim and the outcome group are not both prepared on the kept sessions: {on_kept:?}"
    );
    let on_main: Vec<String> = sqlx::query_scalar("SELECT statement FROM pg_prepared_statements")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert!(
        !on_main.iter().any(|s| kept_statement(s)),
        "a claim or outcome group ran on the main pool: {on_main:?}"
    );
}

/// PostgreSQL: a group of 300 outcomes, half delivered and half unknown, written on the
/// dispatcher's kept session whose generic plan was made on a table that already held rows
/// (as after every restart), does work linear in the group's size. The generic plan assumes
/// a few rows per array, so a statement that joined its CTEs to each other again
/// (outcomes × updated rows) filtered out the square of the group's size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_outcome_group_is_written_in_linear_work() {
    use outboxd::store::RecordResult;
    const GROUP: usize = 300;
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let outboxd::store::Database::Postgres(pool) = &t.db else {
        unreachable!("a PostgreSQL test database");
    };
    for i in 0..=GROUP {
        support::harness::enqueue_committed(
            &t.db,
            outboxd::NewIntent::new(
                "acme",
                format!("op-{i}"),
                REFUND,
                serde_json::json!({"n": i}),
            ),
        )
        .await;
    }
    let kept = std::sync::Arc::new(outboxd::store::postgres::DispatcherSessions::beside(pool));
    let store: std::sync::Arc<dyn outboxd::store::OutboxStore> = std::sync::Arc::new(
        outboxd::store::postgres::PgStore::for_dispatcher(pool.clone(), kept.clone()),
    );
    let limit = u32::try_from(GROUP + 1).unwrap();
    let claimed = store
        .claim_due(&claim_request(
            "planner",
            Duration::from_secs(60),
            limit,
            vec![REFUND.to_owned()],
        ))
        .await
        .unwrap();
    assert_eq!(claimed.len(), GROUP + 1);
    // One outcome first: the outcome group's plan is made now, on a table with rows.
    assert_eq!(
        store
            .record_outcomes(&[delivered(&claimed[0])])
            .await
            .unwrap(),
        vec![RecordResult::Recorded]
    );
    // The rest as one group, through the same kept statement, with the plan's row counts.
    let mut conn = kept
        .try_session(outboxd::store::postgres::SessionRole::Outcomes)
        .await
        .unwrap()
        .expect("no statement runs now");
    let name: String = sqlx::query_scalar(
        "SELECT name FROM pg_prepared_statements \
         WHERE starts_with(statement, E'\\nWITH o AS (')",
    )
    .fetch_optional(&mut *conn)
    .await
    .unwrap()
    .expect("the outcome group is prepared on the outcomes session");
    // This pool sets no planner option itself: the kept session's own settings decide.
    let (generic, custom): (i64, i64) = sqlx::query_as(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = $1",
    )
    .bind(&name)
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    assert_eq!((generic, custom), (1, 0), "the outcome group's plans");
    let rest = &claimed[1..];
    let list = |values: Vec<String>| format!("'{{{}}}'", values.join(","));
    let ids = list(rest.iter().map(|c| c.id.get().to_string()).collect());
    let tokens = list(rest.iter().map(|c| c.fencing_token.to_string()).collect());
    let states = list(
        (0..GROUP)
            .map(|i| if i % 2 == 0 { "delivered" } else { "unknown" }.to_owned())
            .collect(),
    );
    let classes = list(
        (0..GROUP)
            .map(|i| if i % 2 == 0 { "delivered" } else { "ambiguous" }.to_owned())
            .collect(),
    );
    let n = GROUP;
    let explain = format!(
        "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE {name}(\
         {ids}::bigint[], {tokens}::bigint[], {states}::text[], \
         array_fill(NULL::timestamptz, ARRAY[{n}]), array_fill(NULL::text, ARRAY[{n}]), \
         array_fill('no answer'::text, ARRAY[{n}]), array_fill(200, ARRAY[{n}]), \
         array_fill(0, ARRAY[{n}]), array_fill(now(), ARRAY[{n}]), {classes}::text[], \
         array_fill(1::bigint, ARRAY[{n}]), now(), array_fill(now(), ARRAY[{n}]))"
    );
    let plan: serde_json::Value = sqlx::query_scalar(sqlx::AssertSqlSafe(explain))
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    fn removed(node: &serde_json::Value) -> f64 {
        let loops = node["Actual Loops"].as_f64().unwrap_or(1.0);
        let own: f64 = ["Rows Removed by Filter", "Rows Removed by Join Filter"]
            .iter()
            .filter_map(|k| node[*k].as_f64())
            .sum();
        let children: f64 = node["Plans"]
            .as_array()
            .map_or(0.0, |plans| plans.iter().map(removed).sum());
        own * loops + children
    }
    let filtered = removed(&plan[0]["Plan"]);
    let applied: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM outbox_intents WHERE state IN ('delivered', 'unknown')",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(applied, i64::try_from(GROUP + 1).unwrap(), "{plan}");
    assert!(
        filtered <= 2.0 * GROUP as f64,
        "a group of {GROUP} outcomes filtered out {filtered} rows: {plan}"
    );
}

/// Ends the server process `pid` and waits (up to 5 s) until it has ended.
async fn terminate_backend(pool: &sqlx::PgPool, pid: i32) {
    let terminated: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1, 5000)")
        .bind(pid)
        .fetch_one(pool)
        .await
        .unwrap();
    assert!(terminated, "server process {pid} did not end");
}

/// PostgreSQL: the dispatcher's sessions are held between statements, not handed through a
/// pool that checks each one out and in with round trips of its own (decision 0024); a
/// second caller while one is busy runs on the pool instead of waiting; and a session whose
/// server process died costs one failed statement, after which a new session serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatcher_session_is_held_and_replaced_once_it_broke() {
    use outboxd::store::postgres::{DispatcherSessions, SessionRole};
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let outboxd::store::Database::Postgres(pool) = &t.db else {
        unreachable!("a PostgreSQL test database");
    };
    for i in 0..4 {
        support::harness::enqueue_committed(
            &t.db,
            outboxd::NewIntent::new("acme", format!("op-{i}"), REFUND, serde_json::json!({})),
        )
        .await;
    }
    let kept = std::sync::Arc::new(DispatcherSessions::beside(pool));
    let store: std::sync::Arc<dyn outboxd::store::OutboxStore> = std::sync::Arc::new(
        outboxd::store::postgres::PgStore::for_dispatcher(pool.clone(), kept.clone()),
    );
    let one = || claim_request("held", Duration::from_secs(60), 1, vec![REFUND.to_owned()]);
    let claims_pid = || async {
        let mut session = kept
            .try_session(SessionRole::Claims)
            .await
            .unwrap()
            .expect("no statement runs now");
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut *session)
            .await
            .unwrap();
        session.keep();
        pid
    };
    assert_eq!(store.claim_due(&one()).await.unwrap().len(), 1);
    let first = claims_pid().await;
    assert_eq!(store.claim_due(&one()).await.unwrap().len(), 1);
    assert_eq!(
        claims_pid().await,
        first,
        "the claims session was not held between claims"
    );

    // Busy: a second caller claims on the pool at once, without waiting for the session.
    let busy = kept
        .try_session(SessionRole::Claims)
        .await
        .unwrap()
        .unwrap();
    let beside = tokio::time::timeout(Duration::from_secs(10), store.claim_due(&one()))
        .await
        .expect("a claim waited for the busy session");
    assert_eq!(beside.unwrap().len(), 1);
    let since_used = std::time::Instant::now();
    busy.keep();

    // The session's server process ends (a restart, an operator): one claim fails, and it
    // closes the session; the next one opens a new session and claims. That holds while the
    // session has not sat idle long enough to be checked first; on a machine so loaded that
    // it has, the check replaces the session (the part below covers that case).
    terminate_backend(pool, first).await;
    let claimed = store.claim_due(&one()).await;
    if since_used.elapsed() < outboxd::store::postgres::CHECK_AFTER_IDLE {
        assert!(
            claimed.is_err(),
            "a claim on a session whose server process ended succeeded"
        );
        assert!(
            !kept.is_open(SessionRole::Claims),
            "a failed statement left its session open"
        );
        assert_eq!(store.claim_due(&one()).await.unwrap().len(), 1);
    } else {
        eprintln!("NOTE: the termination took past the idle check; the failed-statement path was not exercised in this run");
        assert_eq!(claimed.unwrap().len(), 1);
    }
    let second = claims_pid().await;
    assert_ne!(second, first);

    // The same while the session sat idle: it is checked before use, and no claim fails.
    support::harness::enqueue_committed(
        &t.db,
        outboxd::NewIntent::new("acme", "op-late", REFUND, serde_json::json!({})),
    )
    .await;
    terminate_backend(pool, second).await;
    tokio::time::sleep(outboxd::store::postgres::CHECK_AFTER_IDLE).await;
    assert_eq!(store.claim_due(&one()).await.unwrap().len(), 1);
    assert_ne!(claims_pid().await, second);
    let in_flight: i64 =
        sqlx::query_scalar("SELECT count(*) FROM outbox_intents WHERE state = 'in_flight'")
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!(in_flight, 5, "every claim that succeeded, and no other");
}

/// A loopback relay to PostgreSQL whose open connections can be frozen (nothing more is
/// relayed on them and nothing is closed, as when a firewall silently drops an idle flow;
/// what arrives meanwhile is held and relayed once thawed, as after a long stall)
/// and which can refuse new ones (closed at once). Connections opened after a freeze relay
/// normally. Connections are numbered from 0 in the order they were accepted.
struct Relay {
    port: u16,
    accepted: std::sync::Arc<std::sync::atomic::AtomicU64>,
    frozen_from: std::sync::Arc<std::sync::atomic::AtomicU64>,
    frozen_below: std::sync::Arc<std::sync::atomic::AtomicU64>,
    refusing: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Relay {
    async fn to(target: (String, u16)) -> Relay {
        use std::sync::atomic::Ordering;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let relay = Relay {
            port: listener.local_addr().unwrap().port(),
            accepted: Default::default(),
            frozen_from: Default::default(),
            frozen_below: Default::default(),
            refusing: Default::default(),
        };
        let (counted, frozen, refusing) = (
            relay.accepted.clone(),
            (relay.frozen_from.clone(), relay.frozen_below.clone()),
            relay.refusing.clone(),
        );
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let id = counted.fetch_add(1, Ordering::SeqCst);
                if refusing.load(Ordering::SeqCst) {
                    continue;
                }
                let Ok(server) = tokio::net::TcpStream::connect(&target).await else {
                    continue;
                };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                for (mut from, mut to) in [(client_read, server_write), (server_read, client_write)]
                {
                    let frozen = frozen.clone();
                    tokio::spawn(async move {
                        let mut buf = vec![0u8; 16 * 1024];
                        while let Ok(n @ 1..) = from.read(&mut buf).await {
                            let (from, below) = &frozen;
                            // Held (not dropped) while frozen, relayed once thawed.
                            while (from.load(Ordering::SeqCst)..below.load(Ordering::SeqCst))
                                .contains(&id)
                            {
                                tokio::time::sleep(Duration::from_millis(5)).await;
                            }
                            if to.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    });
                }
            }
        });
        relay
    }

    /// Freezes every connection open now.
    fn freeze(&self) {
        use std::sync::atomic::Ordering;
        let open = self.accepted.load(Ordering::SeqCst);
        self.frozen_from.store(0, Ordering::SeqCst);
        self.frozen_below.store(open, Ordering::SeqCst);
    }

    /// Freezes connection `id` only (instead of what was frozen before).
    fn freeze_one(&self, id: u64) {
        use std::sync::atomic::Ordering;
        self.frozen_below.store(0, Ordering::SeqCst);
        self.frozen_from.store(id, Ordering::SeqCst);
        self.frozen_below.store(id + 1, Ordering::SeqCst);
    }

    /// Freezes every connection opened from now on (the server seems not to answer new
    /// connections), instead of what was frozen before.
    fn freeze_new(&self) {
        use std::sync::atomic::Ordering;
        self.frozen_below.store(0, Ordering::SeqCst);
        self.frozen_from.store(self.accepted(), Ordering::SeqCst);
        self.frozen_below.store(u64::MAX, Ordering::SeqCst);
    }

    /// Relays every frozen connection again, with what it held back.
    fn thaw(&self) {
        self.frozen_below
            .store(0, std::sync::atomic::Ordering::SeqCst);
    }

    /// Connections accepted so far.
    fn accepted(&self) -> u64 {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Closes every new connection at once from now on.
    fn refuse(&self) {
        self.refusing
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Relays new connections again (after [`Relay::refuse`]).
    fn accept(&self) {
        self.refusing
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A claim of one refund intent for the relayed store's owner, leased for a minute.
fn one_relayed() -> outboxd::store::ClaimRequest {
    claim_request(
        "relayed",
        Duration::from_secs(60),
        1,
        vec![REFUND.to_owned()],
    )
}

/// Opens one connection of `pool` and lets it go back idle, then has `relay` refuse every
/// new connection: the dispatcher's sessions cannot open, the pool still has one.
async fn refuse_all_but_one_pooled(pool: &sqlx::PgPool, relay: &Relay) {
    drop(pool.acquire().await.unwrap());
    wait_idle(pool).await;
    relay.refuse();
}

/// Waits (up to 10 s) until `pool` has a connection idle: sqlx hands a connection back in a
/// task of its own, after checking it, and a caller that found none idle would open another.
async fn wait_idle(pool: &sqlx::PgPool) {
    let idle = tokio::time::timeout(Duration::from_secs(10), async {
        while pool.num_idle() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    idle.await.expect("the pool's connection went back idle");
}

/// The dispatcher's store of `t`'s schema, reached through a [`Relay`].
async fn relayed_dispatcher_store(
    t: &TestDb,
) -> (
    Relay,
    sqlx::PgPool,
    std::sync::Arc<outboxd::store::postgres::DispatcherSessions>,
    std::sync::Arc<dyn outboxd::store::OutboxStore>,
) {
    let outboxd::store::Database::Postgres(pool) = &t.db else {
        unreachable!("a PostgreSQL test database");
    };
    let direct = (*pool.connect_options()).clone();
    let relay = Relay::to((direct.get_host().to_owned(), direct.get_port())).await;
    let relayed = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        // Longer than `OUTCOME_WRITE_TIMEOUT`, so that the write's own deadline, not the
        // idle check's, ends a write on a frozen session.
        .acquire_timeout(Duration::from_secs(8))
        .connect_lazy_with(direct.host("127.0.0.1").port(relay.port));
    let kept = std::sync::Arc::new(outboxd::store::postgres::DispatcherSessions::beside(
        &relayed,
    ));
    let store: std::sync::Arc<dyn outboxd::store::OutboxStore> = std::sync::Arc::new(
        outboxd::store::postgres::PgStore::for_dispatcher(relayed.clone(), kept.clone()),
    );
    for i in 0..2 {
        support::harness::enqueue_committed(
            &t.db,
            outboxd::NewIntent::new("acme", format!("op-{i}"), REFUND, serde_json::json!({})),
        )
        .await;
    }
    (relay, relayed, kept, store)
}

/// PostgreSQL: a dispatcher's session whose connection was silently dropped while it sat
/// idle (no answer, no reset) is given up after the acquire timeout, and the claim runs on
/// a new session; the check before use does not wait for an answer that never comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silently_dropped_idle_session_is_replaced() {
    use outboxd::store::postgres::CHECK_AFTER_IDLE;
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let (relay, _pool, kept, store) = relayed_dispatcher_store(&t).await;
    assert_eq!(store.claim_due(&one_relayed()).await.unwrap().len(), 1);
    relay.freeze();
    tokio::time::sleep(CHECK_AFTER_IDLE).await;
    let claimed = tokio::time::timeout(Duration::from_secs(15), store.claim_due(&one_relayed()))
        .await
        .expect("a claim waited on a session whose connection no longer answers");
    assert_eq!(claimed.unwrap().len(), 1);
    // On a new session, not on the pool: the relay saw a second connection, and it is kept.
    assert_eq!(
        relay.accepted.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "connections through the relay"
    );
    assert!(kept.is_open(outboxd::store::postgres::SessionRole::Claims));
}

/// PostgreSQL: when the dispatcher's session cannot be opened (here the server closes every
/// new connection) but the pool has a connection, the claim runs on the pool instead of
/// failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_cannot_open_leaves_the_claim_to_the_pool() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let (relay, pool, kept, store) = relayed_dispatcher_store(&t).await;
    refuse_all_but_one_pooled(&pool, &relay).await;
    let claimed = store.claim_due(&one_relayed()).await;
    let claimed = claimed.expect("the claim failed with the pool's connection still open");
    assert_eq!(claimed.len(), 1);
    // The session was tried (a connection refused) and is not open.
    assert_eq!(
        relay.accepted(),
        2,
        "connections through the relay: the pool's, then the refused session"
    );
    assert!(!kept.is_open(outboxd::store::postgres::SessionRole::Claims));
    // The same for the outcome write, once the pool's connection is idle again.
    wait_idle(&pool).await;
    let written = store
        .record_outcomes(&[delivered(&claimed[0])])
        .await
        .expect("the outcome write failed with the pool's connection still open");
    assert_eq!(written, vec![outboxd::store::RecordResult::Recorded]);
    assert_eq!(relay.accepted(), 3, "the refused outcome writes' session");
    assert!(!kept.is_open(outboxd::store::postgres::SessionRole::Outcomes));
}

/// A dispatcher on `store` (its own provider and actions), claiming one intent per step.
fn relayed_dispatcher(
    store: &std::sync::Arc<dyn outboxd::store::OutboxStore>,
    lease: Duration,
) -> (
    outboxd::fake_provider::FakeProvider,
    outboxd::dispatch::Dispatcher,
) {
    use outboxd::fake_provider::{FakeProvider, FakeProviderOptions};
    let provider = FakeProvider::start(FakeProviderOptions::default()).unwrap();
    let actions = support::harness::test_actions(&provider, Duration::from_secs(24 * 3600));
    let settings = outboxd::dispatch::DispatcherSettings {
        batch_size: 1,
        concurrency: 1,
        lease,
        ..support::harness::test_settings("relayed")
    };
    let dispatcher =
        outboxd::dispatch::Dispatcher::new(store.clone(), std::sync::Arc::new(actions), settings);
    (provider, dispatcher)
}

/// PostgreSQL: an outcome write whose session stops answering is abandoned after
/// `OUTCOME_WRITE_TIMEOUT` and written again on a new session while the lease lasts; the
/// outcome is recorded, not left to the lease's expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_write_that_never_answers_is_written_again() {
    use outboxd::dispatch::dispatcher::OUTCOME_WRITE_TIMEOUT;
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let (relay, _pool, _kept, store) = relayed_dispatcher_store(&t).await;
    // Room for one abandoned write and a second one within 80 % of the lease.
    let (provider, dispatcher) = relayed_dispatcher(&store, Duration::from_secs(10));
    let first = dispatcher.claim_and_deliver().await.unwrap();
    assert_eq!(first.delivered, 1, "{first:?}");
    assert_eq!(relay.accepted(), 2, "connections through the relay");
    relay.freeze_one(1);
    let started = std::time::Instant::now();
    let step = tokio::time::timeout(Duration::from_secs(20), dispatcher.claim_and_deliver())
        .await
        .expect("an outcome write waited on a session whose connection no longer answers");
    let took = started.elapsed();
    let step = step.expect("the outcome was written again on a new session");
    assert_eq!(step.delivered, 1, "{step:?}");
    assert_eq!(step.fenced, 0, "{step:?}");
    assert_eq!(provider.request_count(), 2);
    assert_eq!(relay.accepted(), 3, "a new outcome writes' session");
    // Whether the write or the idle check before it (the session idle past
    // `CHECK_AFTER_IDLE` on a slow machine) met the frozen connection, the write's deadline
    // ended the wait: the check's own (the acquire timeout) is longer.
    assert!(
        took >= OUTCOME_WRITE_TIMEOUT,
        "written again after {took:?}"
    );
    let pending = scalar(
        &t.db,
        "SELECT count(*) FROM outbox_intents WHERE state <> 'delivered'",
    )
    .await;
    assert_eq!(pending, 0);
}

/// Through a [`Relay`] to `t`'s schema with a 2 s lease: one intent delivered, then the
/// claims' session (connection 0, its claim statement prepared already, so the next claim
/// is sent whole: bind, execute, sync) frozen, and a claim given up on by the claimer after
/// the lease. The other of the two intents is still due.
async fn a_claim_given_up_on(
    t: &TestDb,
) -> (
    Relay,
    outboxd::fake_provider::FakeProvider,
    outboxd::dispatch::Dispatcher,
) {
    let (relay, _pool, _kept, store) = relayed_dispatcher_store(t).await;
    let lease = Duration::from_secs(2);
    let (provider, dispatcher) = relayed_dispatcher(&store, lease);
    let metrics = std::sync::Arc::new(outboxd::metrics::Metrics::new());
    let dispatcher = dispatcher.with_metrics(metrics.clone());
    let first = dispatcher.claim_and_deliver().await.unwrap();
    assert_eq!(first.delivered, 1, "{first:?}");
    // Connection 0 is the claims' session, 1 the outcome writes'.
    assert_eq!(relay.accepted(), 2, "connections through the relay");
    relay.freeze_one(0);
    let started = std::time::Instant::now();
    let hung = tokio::time::timeout(Duration::from_secs(15), dispatcher.claim_and_deliver())
        .await
        .expect("a claim waited on a session whose connection no longer answers");
    let err = hung.expect_err("the claim on a frozen connection cannot have succeeded");
    assert!(err.to_string().contains("did not answer"), "{err}");
    assert!(started.elapsed() >= lease, "given up on before the lease");
    let text = metrics.encode().unwrap();
    assert!(text.contains("outboxd_claims_given_up_total 1"), "{text}");
    (relay, provider, dispatcher)
}

/// PostgreSQL: a claim whose session stops answering while the claim is on it (a
/// connection dropped silently mid-statement) is given up on after the lease, and the
/// next claim runs on the pool; the claimer does not wait forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_that_never_answers_is_abandoned_after_the_lease() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let (relay, provider, dispatcher) = a_claim_given_up_on(&t).await;
    let next = dispatcher.claim_and_deliver().await.unwrap();
    assert_eq!(next.delivered, 1, "the next claim, on the pool: {next:?}");
    // On the pool: the claim given up on holds the claims' session until it ends.
    assert_eq!(relay.accepted(), 3, "a pool connection");
    assert_eq!(provider.request_count(), 2);
}

/// A transaction on `direct` holding `ACCESS EXCLUSIVE` on `outbox_intents` (a migration or
/// a manual `ALTER` would): every claim queues behind it until it ends.
async fn lock_the_outbox_table(
    direct: &sqlx::PgPool,
) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut locker = direct.begin().await.unwrap();
    sqlx::query("LOCK TABLE outbox_intents IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *locker)
        .await
        .unwrap();
    locker
}

/// PostgreSQL: a claim queued behind a lock on the outbox table is cancelled by the server
/// at its deadline (half the lease), before the claimer would give up on it, and claims
/// nothing: no row stays claimed for a request that is never sent, even once the lock is
/// released. The next claim delivers. Both where a claim runs: on the dispatcher's session
/// and in a pool transaction (any other store), each delivering one of the two intents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_behind_a_lock_is_cancelled_by_the_server_and_claims_nothing() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let outboxd::store::Database::Postgres(direct) = &t.db else {
        unreachable!("a PostgreSQL test database");
    };
    let (_relay, _pool, _kept, sessions) = relayed_dispatcher_store(&t).await;
    let lease = Duration::from_secs(2);
    for (store, via) in [
        (sessions, "the dispatcher's session"),
        (t.db.store(), "the pool"),
    ] {
        let (provider, dispatcher) = relayed_dispatcher(&store, lease);
        let locker = lock_the_outbox_table(direct).await;
        let started = std::time::Instant::now();
        let claimed = tokio::time::timeout(Duration::from_secs(15), dispatcher.claim_and_deliver())
            .await
            .expect("a claim behind a lock was never given up");
        let took = started.elapsed();
        let err = claimed.expect_err("a claim behind the lock cannot have succeeded");
        assert!(
            err.to_string().contains("statement timeout"),
            "{via}: not cancelled by the server: {err}"
        );
        assert!(took < lease, "{via}: cancelled after {took:?}");
        // Held past the lease: a claim still queued would now be granted and commit.
        tokio::time::sleep(lease.saturating_sub(took) + Duration::from_millis(500)).await;
        locker.rollback().await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let taken = scalar(
            &t.db,
            "SELECT count(*) FROM outbox_intents WHERE state = 'in_flight'",
        )
        .await;
        assert_eq!(taken, 0, "{via}: rows claimed by a cancelled claim");
        assert_eq!(provider.request_count(), 0, "{via}");
        let next = dispatcher.claim_and_deliver().await.unwrap();
        assert_eq!(next.delivered, 1, "{via}: {next:?}");
    }
}

/// PostgreSQL: a dispatcher's session that could not be opened is left alone for
/// `REOPEN_AFTER`: the statements meanwhile run on the pool without trying it again (one
/// failed connection and one warning per back-off, not per statement), and once the
/// back-off has passed and the server accepts connections again, a new session serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_failed_to_open_is_tried_again_only_after_a_back_off() {
    use outboxd::store::postgres::{SessionRole, REOPEN_AFTER};
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let (relay, pool, kept, store) = relayed_dispatcher_store(&t).await;
    refuse_all_but_one_pooled(&pool, &relay).await;
    let first = store.claim_due(&one_relayed()).await.unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(relay.accepted(), 2, "the pool's, then the refused session");
    wait_idle(&pool).await;
    let second = store.claim_due(&one_relayed()).await.unwrap();
    assert_eq!(second.len(), 1, "the second claim, on the pool");
    assert_eq!(
        relay.accepted(),
        2,
        "the session was tried again within its back-off"
    );
    assert!(!kept.is_open(SessionRole::Claims));
    relay.accept();
    tokio::time::sleep(REOPEN_AFTER + Duration::from_millis(200)).await;
    wait_idle(&pool).await;
    let third = store.claim_due(&one_relayed()).await.unwrap();
    assert!(third.is_empty(), "both intents were claimed: {third:?}");
    assert_eq!(relay.accepted(), 3, "a new session after the back-off");
    assert!(kept.is_open(SessionRole::Claims));
}

/// PostgreSQL: a claim that reaches the server only after the claimer gave up on it (its
/// connection stalled past the lease, then passed the statement on) still commits; the
/// rows it claimed are handed back unsent when its late answer arrives, not left in flight
/// to be taken over later as ambiguous attempts (for a `not_idempotent` action, a
/// reconciliation item for a request that was never sent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_answered_after_the_claimer_gave_up_is_handed_back() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let (relay, provider, dispatcher) = a_claim_given_up_on(&t).await;
    relay.thaw();
    let in_flight = "SELECT count(*) FROM outbox_intents WHERE state = 'in_flight'";
    let handed_back = "SELECT count(*) FROM outbox_attempts WHERE class = 'not_sent'";
    let settled = tokio::time::timeout(Duration::from_secs(10), async {
        while scalar(&t.db, handed_back).await != 1 || scalar(&t.db, in_flight).await != 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    if settled.await.is_err() {
        panic!(
            "the late claim was not handed back: {} in flight, {} handed back",
            scalar(&t.db, in_flight).await,
            scalar(&t.db, handed_back).await
        );
    }
    assert_eq!(provider.request_count(), 1, "the late claim was sent");
    let ambiguous = scalar(
        &t.db,
        "SELECT coalesce(sum(ambiguous_attempts), 0) FROM outbox_intents",
    )
    .await;
    assert_eq!(ambiguous, 0);
    let next = dispatcher.claim_and_deliver().await.unwrap();
    assert_eq!(
        next.delivered, 1,
        "the handed-back intent, delivered: {next:?}"
    );
}

/// PostgreSQL: when new connections get no answer, an outcome write gives up on opening its
/// session after `OUTCOME_WRITE_TIMEOUT` (shorter than the open's own timeout), and its
/// retry runs on the pool's open connection instead of waiting on another open that will
/// not answer: the outcome is recorded with one stalled open, not lost to the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_write_whose_session_cannot_open_in_time_runs_on_the_pool() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let (relay, pool, kept, store) = relayed_dispatcher_store(&t).await;
    drop(pool.acquire().await.unwrap());
    wait_idle(&pool).await;
    let (provider, dispatcher) = relayed_dispatcher(&store, Duration::from_secs(10));
    assert!(!kept.is_open(outboxd::store::postgres::SessionRole::Outcomes));
    // The claims' session opens now (connection 1); the outcome writes' would be next.
    assert_eq!(
        store.claim_due(&one_relayed()).await.unwrap().len(),
        1,
        "the first intent, claimed and left"
    );
    relay.freeze_new();
    let step = tokio::time::timeout(Duration::from_secs(20), dispatcher.claim_and_deliver())
        .await
        .expect("the step waited on opens that never answer");
    let step = step.expect("the outcome was not recorded");
    assert_eq!((step.delivered, step.fenced), (1, 0), "{step:?}");
    assert_eq!(provider.request_count(), 1);
    assert_eq!(
        relay.accepted(),
        3,
        "the pool's, the claims' session, one stalled outcome session"
    );
}

/// PostgreSQL: an outcome write given up on after `OUTCOME_WRITE_TIMEOUT` (here queued
/// behind a row lock) that still commits before its retry is counted as recorded, not as a
/// lease lost to a takeover: the intent kept the claim's fencing token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_written_by_a_try_given_up_on_is_not_a_lost_lease() {
    use outboxd::dispatch::dispatcher::OUTCOME_WRITE_TIMEOUT;
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let outboxd::store::Database::Postgres(direct) = &t.db else {
        unreachable!("a PostgreSQL test database");
    };
    let (relay, _pool, _kept, store) = relayed_dispatcher_store(&t).await;
    let (provider, dispatcher) = relayed_dispatcher(&store, Duration::from_secs(12));
    let first = dispatcher.claim_and_deliver().await.unwrap();
    assert_eq!(first.delivered, 1, "{first:?}");
    assert_eq!(
        relay.accepted(),
        2,
        "the claims' and the outcome writes' sessions"
    );
    // The outcome writes' session has its statement prepared now: a try is sent whole, and
    // the server goes on with it after the client gave up on it.
    provider.set_latency(Duration::from_millis(400));
    let dispatcher = std::sync::Arc::new(dispatcher);
    let step = tokio::spawn({
        let dispatcher = dispatcher.clone();
        async move { dispatcher.claim_and_deliver().await }
    });
    let mut locker = direct.begin().await.unwrap();
    let locked = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let row: Option<i64> = sqlx::query_scalar(
                "SELECT id FROM outbox_intents WHERE state = 'in_flight' FOR UPDATE",
            )
            .fetch_optional(&mut *locker)
            .await
            .unwrap();
            if row.is_some() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    locked.await.expect("the second intent was never in flight");
    // Past the first try's deadline with a second to spare after the 400 ms request; the
    // retry (at 80 % of the 12 s lease at the latest) still has seconds left.
    tokio::time::sleep(OUTCOME_WRITE_TIMEOUT + Duration::from_millis(1400)).await;
    locker.commit().await.unwrap();
    let step = step.await.unwrap().expect("the outcome was recorded");
    assert_eq!(
        relay.accepted(),
        4,
        "after the two sessions: the retry's new session, the pool's connection for the \
         fencing read"
    );
    assert_eq!((step.delivered, step.fenced), (1, 0), "{step:?}");
    assert_eq!(provider.request_count(), 2);
    let attempts = scalar(&t.db, "SELECT count(*) FROM outbox_attempts").await;
    assert_eq!(attempts, 2, "one attempt row per delivery");
}

/// PostgreSQL: the claims' deadline (half the lease) does not loosen a stricter
/// `statement_timeout` an operator set for the connection (here in its options; one set
/// for the role or the database is the session's default the same way), and a looser one
/// does not extend it: a claim behind a lock is cancelled by the stricter of the two. On
/// the dispatcher's session and in a pool transaction alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stricter_statement_timeout_set_by_the_operator_is_kept_for_claims() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let outboxd::store::Database::Postgres(direct) = &t.db else {
        unreachable!("a PostgreSQL test database");
    };
    support::harness::enqueue_committed(
        &t.db,
        outboxd::NewIntent::new("acme", "op-strict", REFUND, serde_json::json!({})),
    )
    .await;
    // (the operator's setting, the lease, what must cancel the claim, and before when)
    let cases = [
        ("300", Duration::from_secs(20), Duration::from_secs(5)),
        ("600000", Duration::from_secs(2), Duration::from_secs(2)),
    ];
    for (operator, lease, within) in cases {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .connect_lazy_with(
                (*direct.connect_options())
                    .clone()
                    .options([("statement_timeout", operator)]),
            );
        let kept = std::sync::Arc::new(outboxd::store::postgres::DispatcherSessions::beside(&pool));
        let stores: [(&str, std::sync::Arc<dyn outboxd::store::OutboxStore>); 2] = [
            (
                "the dispatcher's session",
                std::sync::Arc::new(outboxd::store::postgres::PgStore::for_dispatcher(
                    pool.clone(),
                    kept,
                )),
            ),
            (
                "the pool",
                std::sync::Arc::new(outboxd::store::postgres::PgStore::new(pool.clone())),
            ),
        ];
        let request = outboxd::store::ClaimRequest {
            lease,
            ..one_relayed()
        };
        for (via, store) in stores {
            let locker = lock_the_outbox_table(direct).await;
            let started = std::time::Instant::now();
            let claimed = tokio::time::timeout(lease * 2, store.claim_due(&request))
                .await
                .unwrap_or_else(|_| panic!("{via}, {operator} ms: not cancelled by the server"));
            let took = started.elapsed();
            locker.rollback().await.unwrap();
            let err = claimed.expect_err("a claim behind the lock cannot have succeeded");
            assert!(
                err.to_string().contains("statement timeout"),
                "{via}, {operator} ms: {err}"
            );
            assert!(
                took < within,
                "{via}: the operator's {operator} ms and a {lease:?} lease: cancelled after {took:?}"
            );
        }
    }
}
