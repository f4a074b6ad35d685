//! An idle dispatcher wakes for its own outbox's inserts, not for another outbox's in the
//! same PostgreSQL database (migration 0007: the notification names its schema). A
//! notification without a payload, as a trigger older than 0007 sends, still wakes it.

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
