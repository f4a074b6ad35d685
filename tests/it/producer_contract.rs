//! The producer contract (issue: outbox store), run on SQLite and PostgreSQL with the same
//! bodies: the seven cases of the seed companion plus a restarted process.

use crate::support;
use sqlx::AssertSqlSafe;

use outboxd::store::Database;
use outboxd::{enqueue, EnqueueError, Enqueued, NewIntent};
use serde_json::json;
use support::cli::Cli;
use support::harness::{operation, tenant};
use support::TestDb;

/// What the producer's transaction does after recording the intent.
#[derive(Clone, Copy, PartialEq)]
enum Finish {
    Commit,
    Rollback,
}

/// A producer's business transaction: one business row plus `enqueue`, then commit or roll
/// back.
async fn produce(
    db: &Database,
    order_id: i64,
    intent: NewIntent,
    finish: Finish,
) -> Result<Enqueued, EnqueueError> {
    match db {
        Database::Postgres(pool) => {
            let mut tx = pool.begin().await?;
            sqlx::query("INSERT INTO orders (id, refund_requested) VALUES ($1, true) ON CONFLICT (id) DO NOTHING")
                .bind(order_id)
                .execute(&mut *tx)
                .await?;
            let receipt = enqueue(&mut tx, intent).await?;
            match finish {
                Finish::Commit => tx.commit().await?,
                Finish::Rollback => tx.rollback().await?,
            }
            Ok(receipt)
        }
        Database::Sqlite(pool) => {
            let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
            sqlx::query("INSERT INTO orders (id, refund_requested) VALUES (?1, 1) ON CONFLICT (id) DO NOTHING")
                .bind(order_id)
                .execute(&mut *tx)
                .await?;
            let receipt = enqueue(&mut tx, intent).await?;
            match finish {
                Finish::Commit => tx.commit().await?,
                Finish::Rollback => tx.rollback().await?,
            }
            Ok(receipt)
        }
    }
}

/// Creates the producer's business table.
async fn create_orders(db: &Database) {
    let create = "CREATE TABLE orders (id BIGINT PRIMARY KEY, refund_requested BOOLEAN NOT NULL)";
    match db {
        Database::Postgres(pool) => sqlx::query(AssertSqlSafe(create))
            .execute(pool)
            .await
            .map(|_| ()),
        Database::Sqlite(pool) => sqlx::query(AssertSqlSafe(create))
            .execute(pool)
            .await
            .map(|_| ()),
    }
    .expect("create orders");
}

async fn scalar(db: &Database, sql: &str) -> i64 {
    match db {
        Database::Postgres(pool) => sqlx::query_scalar(AssertSqlSafe(sql))
            .fetch_one(pool)
            .await
            .expect(sql),
        Database::Sqlite(pool) => sqlx::query_scalar(AssertSqlSafe(sql))
            .fetch_one(pool)
            .await
            .expect(sql),
    }
}

async fn intents(db: &Database) -> i64 {
    scalar(db, "SELECT count(*) FROM outbox_intents").await
}

async fn orders(db: &Database) -> i64 {
    scalar(db, "SELECT count(*) FROM orders").await
}

fn refund(op: &str, amount: i64) -> NewIntent {
    NewIntent::new(
        "acme",
        op,
        "issue_refund",
        json!({"order_id": 7, "amount": amount, "currency": "EUR"}),
    )
}

/// Seed case 1: committed, response lost; the retry on a new connection gets the stored
/// receipt flagged replayed, and there is still one intent.
async fn lost_response_after_commit_replays(t: &TestDb) {
    create_orders(&t.db).await;
    let first = produce(&t.db, 7, refund("op-42", 1250), Finish::Commit)
        .await
        .unwrap();
    // The response is lost: the producer never sees `first`; the test keeps it to compare.
    assert!(!first.replayed);
    let other = t.reopen(2).await;
    let retry = produce(&other, 7, refund("op-42", 1250), Finish::Commit)
        .await
        .unwrap();
    assert!(retry.replayed);
    assert_eq!(
        (retry.intent_id, &retry.idempotency_key, retry.state),
        (first.intent_id, &first.idempotency_key, first.state),
        "the replay is the lost receipt"
    );
    assert_eq!(intents(&t.db).await, 1);
    let again = produce(&other, 7, refund("op-42", 1250), Finish::Commit)
        .await
        .unwrap();
    assert_eq!(
        (again.intent_id, &again.idempotency_key),
        (retry.intent_id, &retry.idempotency_key)
    );
    assert_eq!(intents(&t.db).await, 1);
}

/// Seed case 2: the producer rolls back; neither the business row nor the intent exists.
async fn rollback_records_nothing(t: &TestDb) {
    create_orders(&t.db).await;
    let receipt = produce(&t.db, 8, refund("op-rb", 10), Finish::Rollback)
        .await
        .unwrap();
    assert!(!receipt.replayed);
    assert_eq!(intents(&t.db).await, 0);
    assert_eq!(orders(&t.db).await, 0);
    // The same operation can then be recorded for real.
    let real = produce(&t.db, 8, refund("op-rb", 10), Finish::Commit)
        .await
        .unwrap();
    assert!(!real.replayed);
    assert_eq!(intents(&t.db).await, 1);
}

/// Seed case 3: same key, changed arguments → conflict; nothing changes.
async fn changed_arguments_conflict(t: &TestDb) {
    create_orders(&t.db).await;
    let first = produce(&t.db, 7, refund("op-42", 1250), Finish::Commit)
        .await
        .unwrap();
    let err = produce(&t.db, 9, refund("op-42", 9999), Finish::Commit)
        .await
        .unwrap_err();
    assert!(matches!(err, EnqueueError::Conflict { .. }), "{err:?}");
    assert!(err.to_string().contains("op-42"), "{err}");
    assert_eq!(intents(&t.db).await, 1);
    assert_eq!(
        orders(&t.db).await,
        1,
        "the conflicting business write was not committed"
    );
    let row =
        t.db.store()
            .get_intent(first.intent_id)
            .await
            .unwrap()
            .unwrap();
    assert_eq!(row.payload.to_value()["amount"], 1250);
    // A changed payload version is a changed intent too.
    let v2 = refund("op-42", 1250).with_payload_version(2);
    assert!(matches!(
        produce(&t.db, 7, v2, Finish::Commit).await,
        Err(EnqueueError::Conflict { .. })
    ));
}

/// Seed case 4: two operation ids with identical arguments are two intents.
async fn identical_arguments_new_operation_is_new_intent(t: &TestDb) {
    create_orders(&t.db).await;
    let a = produce(&t.db, 7, refund("op-a", 100), Finish::Commit)
        .await
        .unwrap();
    let b = produce(&t.db, 7, refund("op-b", 100), Finish::Commit)
        .await
        .unwrap();
    assert!(!a.replayed && !b.replayed);
    assert_ne!(a.intent_id, b.intent_id);
    assert_ne!(a.idempotency_key, b.idempotency_key);
    assert_eq!(intents(&t.db).await, 2);
}

/// Seed case 5: the same operation id in two tenants is two intents; neither tenant's
/// enqueue or lookup returns the other's result.
async fn tenants_are_separate(t: &TestDb) {
    create_orders(&t.db).await;
    let acme = produce(&t.db, 7, refund("op-42", 1250), Finish::Commit)
        .await
        .unwrap();
    let mut other = refund("op-42", 1250);
    other.tenant = "globex".into();
    let globex = produce(&t.db, 7, other, Finish::Commit).await.unwrap();
    assert!(
        !globex.replayed,
        "another tenant's key must not replay acme's receipt"
    );
    assert_ne!(acme.intent_id, globex.intent_id);
    assert_ne!(acme.idempotency_key, globex.idempotency_key);
    let store = t.db.store();
    let seen = store
        .find_intent(&tenant("globex"), &operation("op-42"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (seen.id, seen.tenant.as_str()),
        (globex.intent_id, "globex")
    );
    assert!(store
        .find_intent(&tenant("initech"), &operation("op-42"))
        .await
        .unwrap()
        .is_none());
    assert_eq!(intents(&t.db).await, 2);
}

/// Seed case 6: invalid input gets an error naming the field; nothing is written and the
/// producer's transaction is still usable.
async fn invalid_input_is_rejected(t: &TestDb) {
    create_orders(&t.db).await;
    let payload = json!({"amount": 1});
    let cases: Vec<(NewIntent, &str)> = vec![
        (
            NewIntent::new("", "op", "issue_refund", payload.clone()),
            "tenant",
        ),
        (
            NewIntent::new("t".repeat(129), "op", "issue_refund", payload.clone()),
            "tenant",
        ),
        (
            NewIntent::new("acme", "", "issue_refund", payload.clone()),
            "operation_id",
        ),
        (
            NewIntent::new("acme", "o".repeat(201), "issue_refund", payload.clone()),
            "operation_id",
        ),
        (NewIntent::new("acme", "op", "", payload.clone()), "action"),
        (
            NewIntent::new("acme", "op", "issue refund", payload.clone()),
            "action",
        ),
        (
            NewIntent::new("acme", "op", "issue_refund", json!([1, 2])),
            "payload",
        ),
        (
            NewIntent::new("acme", "op", "issue_refund", json!("text")),
            "payload",
        ),
        (
            NewIntent::new(
                "acme",
                "op",
                "issue_refund",
                json!({"blob": "x".repeat(300_000)}),
            ),
            "payload",
        ),
        (
            NewIntent::new("acme", "op", "issue_refund", payload.clone()).with_payload_version(0),
            "payload_version",
        ),
        (
            NewIntent::new("acme", "op", "issue_refund", payload.clone()).with_idempotency_key(""),
            "idempotency_key",
        ),
    ];
    for (intent, field) in cases {
        match produce(&t.db, 1, intent, Finish::Commit).await {
            Err(EnqueueError::Invalid(invalid)) => {
                assert_eq!(invalid.field, field, "{invalid}");
                assert!(
                    invalid.to_string().starts_with(&format!("invalid {field}")),
                    "{invalid}"
                );
            }
            other => panic!("expected invalid {field}, got {other:?}"),
        }
    }
    assert_eq!(intents(&t.db).await, 0);
    assert_eq!(orders(&t.db).await, 0);
}

/// Seed case 7: 16 enqueue calls of one operation from 8 tasks on separate connections
/// leave one intent, and every caller gets the same intent id.
async fn concurrent_enqueues_record_one_intent(t: &TestDb) {
    create_orders(&t.db).await;
    let db = t.reopen(8).await;
    let mut tasks = Vec::new();
    for task in 0..8 {
        let db = db.clone();
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for _ in 0..2 {
                let r = produce(&db, 7, refund("op-race", 500), Finish::Commit).await;
                ids.push(r.unwrap_or_else(|e| panic!("task {task}: {e}")));
            }
            ids
        }));
    }
    let mut receipts = Vec::new();
    for task in tasks {
        receipts.extend(task.await.unwrap());
    }
    assert_eq!(receipts.len(), 16);
    let first_id = receipts[0].intent_id;
    assert!(receipts.iter().all(|r| r.intent_id == first_id));
    assert_eq!(
        receipts.iter().filter(|r| !r.replayed).count(),
        1,
        "exactly one caller created it"
    );
    assert_eq!(intents(&t.db).await, 1);
}

/// A fresh process still replays: the first receipt comes from this process, the retry
/// from a separate `outboxd enqueue` process (its own pool and memory), after this
/// process closed its pool; the replay is the first receipt, flagged replayed.
async fn fresh_process_still_replays(t: &TestDb) {
    create_orders(&t.db).await;
    let first = produce(&t.db, 7, refund("op-restart", 70), Finish::Commit)
        .await
        .unwrap();
    assert!(!first.replayed);
    t.db.close().await;
    let cli = Cli::new(t);
    let retry = cli
        .json(&[
            "enqueue",
            "--tenant",
            "acme",
            "--operation-id",
            "op-restart",
            "--action",
            "issue_refund",
            "--payload",
            r#"{"currency": "EUR", "amount": 70, "order_id": 7}"#,
        ])
        .await;
    assert_eq!(retry["replayed"], json!(true), "{retry}");
    assert_eq!(retry["intent_id"], json!(first.intent_id), "{retry}");
    assert_eq!(
        retry["idempotency_key"],
        json!(first.idempotency_key),
        "{retry}"
    );
    let restarted = t.reopen(2).await;
    assert_eq!(intents(&restarted).await, 1);
}

/// The installation's key secret (migration 0003).
async fn key_secret(db: &outboxd::store::Database) -> outboxd::wire_key::KeySecret {
    let sql = "SELECT key_secret FROM outboxd_installation WHERE id = 1";
    let hex: String = match db {
        outboxd::store::Database::Postgres(pool) => {
            sqlx::query_scalar(AssertSqlSafe(sql)).fetch_one(pool).await
        }
        outboxd::store::Database::Sqlite(pool) => {
            sqlx::query_scalar(AssertSqlSafe(sql)).fetch_one(pool).await
        }
    }
    .unwrap();
    outboxd::wire_key::KeySecret::from_hex(&hex).unwrap()
}

/// The key the provider sees is fixed at enqueue: the producer's key (or the derived
/// default), namespaced by tenant with the installation secret; a replay returns it again.
async fn idempotency_key_fixed_at_enqueue(t: &TestDb) {
    create_orders(&t.db).await;
    let secret = key_secret(&t.db).await;
    let acme = "acme".to_string().try_into().unwrap();
    let supplied = refund("op-k1", 1).with_idempotency_key("refund-order-7");
    let a = produce(&t.db, 7, supplied.clone(), Finish::Commit)
        .await
        .unwrap();
    let expected_a = outboxd::wire_key::wire_idempotency_key(
        &secret,
        &acme,
        &"refund-order-7".to_string().try_into().unwrap(),
    );
    assert_eq!(a.idempotency_key, expected_a.as_str());
    let replay = produce(&t.db, 7, supplied, Finish::Commit).await.unwrap();
    assert_eq!(
        (replay.replayed, replay.idempotency_key.as_str()),
        (true, expected_a.as_str())
    );
    let b = produce(&t.db, 7, refund("op-k2", 1), Finish::Commit)
        .await
        .unwrap();
    let default = outboxd::intent::default_idempotency_key(
        &acme,
        &"op-k2".to_string().try_into().unwrap(),
        &"issue_refund".to_string().try_into().unwrap(),
    );
    let expected_b = outboxd::wire_key::wire_idempotency_key(&secret, &acme, &default);
    assert_eq!(b.idempotency_key, expected_b.as_str());
    let row = t.db.store().get_intent(b.intent_id).await.unwrap().unwrap();
    assert_eq!(row.idempotency_key, expected_b.as_str());
    assert_eq!(row.state, outboxd::intent::IntentState::Pending);
}

both_backends!(
    lost_response_after_commit_replays,
    rollback_records_nothing,
    changed_arguments_conflict,
    identical_arguments_new_operation_is_new_intent,
    tenants_are_separate,
    invalid_input_is_rejected,
    concurrent_enqueues_record_one_intent,
    fresh_process_still_replays,
    idempotency_key_fixed_at_enqueue,
);
