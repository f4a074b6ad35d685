//! The PostgreSQL producer contract for other languages: `outbox_enqueue(...)` inside the
//! caller's transaction, and plain `INSERT`s, behave exactly like the Rust `enqueue`.

use crate::support;
use sqlx::AssertSqlSafe;

use outboxd::store::Database;
use outboxd::{enqueue, NewIntent};
use serde_json::json;
use sqlx::{PgPool, Row};
use support::TestDb;

fn pool(t: &TestDb) -> &PgPool {
    let Database::Postgres(pool) = &t.db else {
        unreachable!()
    };
    pool
}

async fn sql_enqueue(
    pool: &PgPool,
    op: &str,
    payload: &str,
) -> Result<(i64, String, bool), sqlx::Error> {
    let row = sqlx::query("SELECT * FROM outbox_enqueue('acme', $1, 'issue_refund', $2::jsonb)")
        .bind(op)
        .bind(payload)
        .fetch_one(pool)
        .await?;
    Ok((
        row.get("intent_id"),
        row.get("idempotency_key"),
        row.get("replayed"),
    ))
}

fn sqlstate(e: &sqlx::Error) -> Option<String> {
    e.as_database_error()
        .and_then(|d| d.code())
        .map(|c| c.into_owned())
}

#[tokio::test]
async fn sql_function_replays_and_conflicts_like_rust() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let pool = pool(&t);
    let (id, key, replayed) = sql_enqueue(pool, "op-1", r#"{"amount": 5, "currency": "EUR"}"#)
        .await
        .unwrap();
    assert!(!replayed);
    // Key order and whitespace do not matter: replay.
    let again = sql_enqueue(pool, "op-1", r#"{ "currency":"EUR", "amount":5 }"#)
        .await
        .unwrap();
    assert_eq!(again, (id, key.clone(), true));
    // The Rust enqueue of the same operation replays the SQL-recorded one: same digest.
    let mut tx = pool.begin().await.unwrap();
    let rust = enqueue(
        &mut tx,
        NewIntent::new(
            "acme",
            "op-1",
            "issue_refund",
            json!({"amount": 5, "currency": "EUR"}),
        ),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert!(rust.replayed);
    assert_eq!((rust.intent_id, rust.idempotency_key), (id, key));
    // Changed payload: documented SQLSTATE OB409, nothing changes.
    let err = sql_enqueue(pool, "op-1", r#"{"amount": 6, "currency": "EUR"}"#)
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err).as_deref(), Some("OB409"), "{err}");
    assert!(err.to_string().contains("conflict"), "{err}");
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_intents")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(n, 1);
}

#[tokio::test]
async fn sql_function_rejects_invalid_input_with_22023() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let pool = pool(&t);
    let cases = [
        (
            "SELECT * FROM outbox_enqueue('', 'op', 'a', '{}')",
            "invalid tenant",
        ),
        (
            "SELECT * FROM outbox_enqueue('acme', '', 'a', '{}')",
            "invalid operation_id",
        ),
        (
            "SELECT * FROM outbox_enqueue('acme', 'op', 'bad action', '{}')",
            "invalid action",
        ),
        (
            "SELECT * FROM outbox_enqueue('acme', 'op', 'a', '[1]')",
            "invalid payload",
        ),
        (
            "SELECT * FROM outbox_enqueue('acme', 'op', 'a', '{}', 0)",
            "invalid payload_version",
        ),
    ];
    for (sql, expected) in cases {
        let err = sqlx::query(AssertSqlSafe(sql))
            .fetch_one(pool)
            .await
            .unwrap_err();
        assert_eq!(sqlstate(&err).as_deref(), Some("22023"), "{sql}: {err}");
        assert!(err.to_string().contains(expected), "{sql}: {err}");
    }
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_intents")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(n, 0);
}

#[tokio::test]
async fn plain_insert_gets_digest_and_key_from_the_database() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let pool = pool(&t);
    sqlx::query("INSERT INTO outbox_intents (tenant, operation_id, action, payload) VALUES ('acme', 'op-p', 'issue_refund', '{\"amount\": 5}')")
        .execute(pool)
        .await
        .unwrap();
    let intent = NewIntent::new("acme", "op-p", "issue_refund", json!({"amount": 5}))
        .validate()
        .unwrap();
    let (digest, key): (String, String) = sqlx::query_as(
        "SELECT payload_sha256, idempotency_key FROM outbox_intents WHERE operation_id = 'op-p'",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(digest, intent.digest.as_str());
    let secret: String = sqlx::query_scalar("SELECT key_secret FROM outboxd_installation")
        .fetch_one(pool)
        .await
        .unwrap();
    let wire = outboxd::wire_key::wire_idempotency_key(
        &outboxd::wire_key::KeySecret::from_hex(&secret).unwrap(),
        &intent.tenant,
        &intent.idempotency_key,
    );
    assert_eq!(key, wire.as_str());
    // Uniqueness is enforced for plain inserts too.
    let dup = sqlx::query("INSERT INTO outbox_intents (tenant, operation_id, action, payload) VALUES ('acme', 'op-p', 'issue_refund', '{}')")
        .execute(pool)
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&dup).as_deref(), Some("23505"));
}

#[tokio::test]
async fn sql_enqueue_inside_a_rolled_back_transaction_records_nothing() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let pool = pool(&t);
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("SELECT * FROM outbox_enqueue('acme', 'op-rb', 'issue_refund', '{}')")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_intents")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(n, 0);
}

#[tokio::test]
async fn plain_insert_of_a_pruned_operation_is_refused() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let pool = pool(&t);
    sqlx::query("INSERT INTO outbox_tombstones (tenant, operation_id, intent_id, action, payload_sha256, idempotency_key, final_state, pruned_at) VALUES ('acme', 'op-old', 1, 'issue_refund', repeat('a', 64), 'k', 'delivered', now())")
        .execute(pool)
        .await
        .unwrap();
    let err = sqlx::query("INSERT INTO outbox_intents (tenant, operation_id, action, payload) VALUES ('acme', 'op-old', 'issue_refund', '{}')")
        .execute(pool)
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err).as_deref(), Some("23505"), "{err}");
    assert!(err.to_string().contains("already recorded"), "{err}");
}
