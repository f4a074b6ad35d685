//! Schema 12 → 13 (migration 0013 lets a producer turn the wake-up notification off) with
//! pending, in-flight and unknown intents: every outboxd function keeps its owner,
//! privileges, flags and pinned path, keys and digests are unchanged, an insert whose
//! producer turned the wake-up off no longer notifies (before 0013 it did), and the
//! dispatcher then delivers each pending intent once under its key and leaves the unknown
//! one alone.

use std::time::Duration;

use crate::support;
use crate::upgrade::{
    all_outboxd_functions, derived_digests, derived_keys, dispatch_after_upgrade,
    record_at_schema_3,
};

use outboxd::dispatch::wakeup::CHANNEL;
use outboxd::store::Database;
use outboxd::NewIntent;
use serde_json::json;
use support::harness::{enqueue_committed, scalar, Harness, REFUND};
use support::TestDb;

/// Inserts `op` in a PostgreSQL transaction that turned the wake-up off, and says whether a
/// notification naming this test's schema arrived within `wait` (other tests share the
/// database and its channel; their notifications name their own schemas, or nothing).
async fn quiet_insert_notified(t: &TestDb, op: &str, wait: Duration) -> bool {
    let Database::Postgres(pool) = &t.db else {
        unreachable!("a PostgreSQL test database")
    };
    let schema = t.schema().expect("a schema of its own").to_owned();
    let mut listener = sqlx::postgres::PgListener::connect_with(pool)
        .await
        .unwrap();
    listener.listen(CHANNEL).await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("SET LOCAL outboxd.wake_dispatchers = off")
        .execute(&mut *tx)
        .await
        .unwrap();
    let intent = NewIntent::new("acme", op, REFUND, json!({"op": op}));
    outboxd::enqueue(&mut tx, intent).await.unwrap();
    tx.commit().await.unwrap();
    let ours = async {
        loop {
            let note = listener.recv().await.unwrap();
            if note.payload() == schema {
                return;
            }
        }
    };
    tokio::time::timeout(wait, ours).await.is_ok()
}

async fn upgrade_to_0013_then_dispatch(t: TestDb) {
    let h = Harness::new(&t).await;
    let ids = record_at_schema_3(&h).await;
    let postgres = matches!(h.db, Database::Postgres(_));
    let before = if postgres {
        assert!(
            quiet_insert_notified(&t, "s12-quiet", Duration::from_secs(10)).await,
            "before 0013 the setting changes nothing"
        );
        Some((
            all_outboxd_functions(&h.db).await,
            derived_keys(&h.db).await,
            derived_digests(&h.db).await,
        ))
    } else {
        let intent = NewIntent::new("acme", "s12-quiet", REFUND, json!({"op": "s12-quiet"}));
        enqueue_committed(&h.db, intent).await;
        None
    };

    let report = t.db.migrate().await.expect("upgrade to the current schema");
    assert_eq!(
        report.applied,
        vec![(13, "wakeups_can_be_turned_off")],
        "{report:?}"
    );
    assert_eq!(
        scalar(&h.db, "SELECT count(*) FROM outbox_intents").await,
        5
    );
    if let Some((functions, keys, digests)) = before {
        assert_eq!(all_outboxd_functions(&h.db).await, functions);
        assert_eq!(derived_keys(&h.db).await, keys, "the same keys after 0013");
        assert_eq!(
            derived_digests(&h.db).await,
            digests,
            "the same digests after 0013"
        );
        assert!(
            !quiet_insert_notified(&t, "s13-quiet", Duration::from_millis(700)).await,
            "after 0013 an insert whose producer turned the wake-up off notified"
        );
    } else {
        let intent = NewIntent::new("acme", "s13-quiet", REFUND, json!({"op": "s13-quiet"}));
        enqueue_committed(&h.db, intent).await;
    }

    dispatch_after_upgrade(&h, ids).await;
    assert_eq!(
        h.provider.effect_count(),
        5,
        "three old pending, the quiet ones before and after 0013"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_to_0013_on_sqlite() {
    upgrade_to_0013_then_dispatch(TestDb::sqlite_at(12).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_to_0013_on_postgres() {
    let Some(t) = TestDb::postgres_at(12).await else {
        return;
    };
    upgrade_to_0013_then_dispatch(t).await;
}
