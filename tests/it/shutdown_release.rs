//! Shutdown hands back the claims it did not send, even when the database fails for a
//! moment: an unsent claim left leased would expire and be judged an ambiguous attempt
//! (for a `not_idempotent` action: a reconciliation item for something never sent).

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use outboxd::dispatch::wakeup::Wakeup;
use outboxd::dispatch::Dispatcher;
use outboxd::intent::IntentState;
use sqlx::Connection;
use support::harness::{exec, scalar, test_settings, Harness, NOTIFY};
use support::TestDb;
use tokio::sync::{watch, Notify};

/// The advisory lock the claim waits for (held by the test).
const CLAIM_GATE: i64 = 740_123_457;

/// Waits until `sql` counts at least one row, up to 20 s.
async fn wait_until(h: &Harness, sql: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while scalar(&h.db, sql).await == 0 {
        assert!(Instant::now() < deadline, "timed out waiting for: {sql}");
        tokio::task::yield_now().await;
    }
}

/// On PostgreSQL (which can hold a claim and fail a statement on cue): the shutdown
/// signal arrives while a claim is in flight, and the first two attempts to hand the
/// claimed intent back fail, as they would while the database restarts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsent_claims_are_released_at_shutdown_despite_database_errors() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let h = Harness::new(&t).await;
    let unsent = h.enqueue_simple("never-sent", NOTIFY).await;
    for statement in [
        "CREATE SEQUENCE release_failures".to_owned(),
        "CREATE FUNCTION fail_first_releases() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN \
             IF NEW.error LIKE 'released unsent%' AND nextval('release_failures') <= 2 THEN \
                 RAISE EXCEPTION 'simulated outage'; \
             END IF; \
             RETURN NEW; \
         END $$"
            .to_owned(),
        "CREATE TRIGGER fail_first_releases BEFORE INSERT ON outbox_attempts \
         FOR EACH ROW EXECUTE FUNCTION fail_first_releases()"
            .to_owned(),
        format!(
            "CREATE FUNCTION hold_claims() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN PERFORM pg_advisory_xact_lock({CLAIM_GATE}); RETURN NEW; END $$"
        ),
        "CREATE TRIGGER hold_claims BEFORE UPDATE ON outbox_intents FOR EACH ROW \
         WHEN (OLD.state = 'pending' AND NEW.state = 'in_flight') \
         EXECUTE FUNCTION hold_claims()"
            .to_owned(),
    ] {
        exec(&h.db, "SELECT 1", &statement).await;
    }
    let url = std::env::var("OUTBOXD_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let mut gate = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(CLAIM_GATE)
        .execute(&mut gate)
        .await
        .unwrap();

    let mut settings = test_settings("stopping");
    settings.concurrency = 1;
    let dispatcher = Arc::new(Dispatcher::new(
        h.db.claim_store(),
        h.actions.clone(),
        settings,
    ));
    let (stop, stopped) = watch::channel(false);
    let wakeup = Wakeup::new(&h.db, Arc::new(Notify::new())).await;
    let run = tokio::spawn(dispatcher.clone().run(wakeup, stopped));
    wait_until(
        &h,
        &format!(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' \
             AND objid = {CLAIM_GATE} AND NOT granted"
        ),
    )
    .await;
    stop.send(true).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !dispatcher.is_stopping() {
        assert!(Instant::now() < deadline, "the dispatcher saw the signal");
        tokio::task::yield_now().await;
    }
    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(CLAIM_GATE)
        .execute(&mut gate)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the dispatcher stopped")
        .unwrap();

    let row = h.intent(unsent.intent_id).await;
    assert_eq!(
        (row.state, row.lease_owner.as_deref()),
        (IntentState::Pending, None),
        "the unsent claim was handed back"
    );
    assert_eq!(h.provider.request_count_for_key(&unsent.idempotency_key), 0);
    assert_eq!(h.open_items(unsent.intent_id).await, 0);
    assert_eq!(
        scalar(&h.db, "SELECT last_value FROM release_failures").await,
        3,
        "two failed releases, then one that worked"
    );
}
