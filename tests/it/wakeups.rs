//! An idle dispatcher wakes for its own outbox's inserts, not for another outbox's in the
//! same PostgreSQL database (migration 0007: the notification names its schema). A
//! notification without a payload, as a trigger older than 0007 sends, still wakes it. A
//! producer may turn the wake-up off (migration 0013: `outboxd.wake_dispatchers = off`).

use std::sync::Arc;
use std::time::Duration;

use outboxd::dispatch::wakeup::{Wakeup, CHANNEL};
use outboxd::store::Database;
use outboxd::NewIntent;
use serde_json::json;
use tokio::sync::Notify;

use crate::support::harness::enqueue_committed;
use crate::support::TestDb;

async fn insert_one(db: &Database, op: &str) {
    let intent = NewIntent::new("acme", op, "issue_refund", json!({"amount": 1}));
    enqueue_committed(db, intent).await;
}

/// A second outbox (its own schema, migrated) in the database of `ours`.
async fn second_outbox(ours: &TestDb) -> Database {
    let Database::Postgres(pool) = &ours.db else {
        unreachable!("PostgreSQL only")
    };
    sqlx::query("CREATE SCHEMA theirs")
        .execute(pool)
        .await
        .unwrap();
    let sep = if ours.url.contains('?') { '&' } else { '?' };
    let url = format!("{}{sep}options=-c%20search_path%3Dtheirs", ours.url);
    let theirs = outboxd::store::connect(&url, 2).await.unwrap();
    theirs.migrate().await.unwrap();
    theirs
}

/// In a database of its own: other tests' inserts (and the empty notifications of schemas
/// older than 0007) would wake the dispatcher in the shared test database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_outbox_in_the_database_does_not_wake_the_dispatcher() {
    let Some(ours) = TestDb::postgres_own_database().await else {
        return;
    };
    let theirs = second_outbox(&ours).await;
    let mut wakeup = Wakeup::new(&ours.db, Arc::new(Notify::new())).await;
    assert!(wakeup.is_listening());

    insert_one(&theirs, "theirs-1").await;
    assert!(
        !wakeup.wait(Duration::from_millis(700)).await,
        "an insert into another schema's outbox woke this dispatcher"
    );

    // Theirs first, then ours, within one wait: ours wakes it.
    insert_one(&theirs, "theirs-2").await;
    insert_one(&ours.db, "ours-1").await;
    assert!(
        wakeup.wait(Duration::from_secs(10)).await,
        "an insert into this dispatcher's own outbox did not wake it"
    );

    // A redispatch in the other outbox notifies with its schema: no wake-up either.
    let Database::Postgres(pool) = &theirs else {
        unreachable!()
    };
    sqlx::query(outboxd::store::postgres::WAKE_DISPATCHERS_SQL)
        .execute(pool)
        .await
        .unwrap();
    assert!(
        !wakeup.wait(Duration::from_millis(700)).await,
        "the other outbox's redispatch notification woke this dispatcher"
    );

    // A notification with no payload (a trigger from before migration 0007, or one sent by
    // hand) wakes it.
    sqlx::query("SELECT pg_notify($1, '')")
        .bind(CHANNEL)
        .execute(pool)
        .await
        .unwrap();
    assert!(
        wakeup.wait(Duration::from_secs(10)).await,
        "a notification without a payload did not wake it"
    );
    theirs.close().await;
}

/// Inserts one intent in a transaction that first runs `setting` (if any) as a statement.
async fn insert_with(db: &Database, op: &str, setting: Option<&str>) {
    let Database::Postgres(pool) = db else {
        unreachable!("PostgreSQL only")
    };
    let mut tx = pool.begin().await.unwrap();
    if let Some(sql) = setting {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    let intent = NewIntent::new("acme", op, "issue_refund", json!({"amount": 1}));
    outboxd::enqueue(&mut tx, intent).await.unwrap();
    tx.commit().await.unwrap();
}

/// A producer that turns the wake-up off for its transaction (in any letter case) wakes no
/// dispatcher, and what it inserted is there to be claimed by the next poll; the next
/// transaction, and one that sets any other value, wakes it again. In a database of its
/// own, as above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_may_turn_the_wake_up_off() {
    let Some(ours) = TestDb::postgres_own_database().await else {
        return;
    };
    let mut wakeup = Wakeup::new(&ours.db, Arc::new(Notify::new())).await;
    assert!(wakeup.is_listening());
    for (op, setting) in [
        ("quiet-1", "SET LOCAL outboxd.wake_dispatchers = off"),
        ("quiet-2", "SET LOCAL outboxd.wake_dispatchers = 'OFF'"),
    ] {
        insert_with(&ours.db, op, Some(setting)).await;
        assert!(
            !wakeup.wait(Duration::from_millis(700)).await,
            "{setting}: the insert woke the dispatcher"
        );
    }
    let due = ours
        .db
        .claim_store()
        .next_due_at(&["issue_refund".to_owned()])
        .await;
    assert!(due.unwrap().is_some(), "the quiet inserts are due");
    for (op, setting) in [
        ("loud-1", None),
        ("loud-2", Some("SET LOCAL outboxd.wake_dispatchers = on")),
    ] {
        insert_with(&ours.db, op, setting).await;
        assert!(
            wakeup.wait(Duration::from_secs(10)).await,
            "{setting:?}: the insert did not wake the dispatcher"
        );
    }
}
