//! Holes a hostile or careless producer could open, each closed and pinned here (issue 14,
//! items 1–4): a tenant squatting another tenant's idempotency key (custom, derived or
//! wire key, through Rust, the SQL function or a hand-written INSERT); a plain INSERT
//! reviving a pruned operation, also while racing the prune; numbers rounded on the way to
//! the provider; Rust and SQL digests disagreeing on big numbers; a function planted in
//! outboxd's schema standing in for a built-in inside the SECURITY DEFINER trigger.

use crate::support;
use sqlx::AssertSqlSafe;

use std::time::Duration;

use chrono::Utc;
use outboxd::intent::IntentState;
use outboxd::reconcile::{run_retention_once, RetentionSettings};
use outboxd::store::Database;
use outboxd::NewIntent;
use serde_json::json;
use support::harness::{operation, scalar, tenant, Harness, REFUND};
use support::TestDb;

fn refund(tenant: &str, op: &str, amount: i64) -> NewIntent {
    NewIntent::new(
        tenant,
        op,
        REFUND,
        json!({"amount": amount, "tenant": tenant}),
    )
}

/// Prunes every finished intent now, leaving tombstones.
async fn prune_all(h: &Harness) {
    let settings = RetentionSettings {
        finished_after: Duration::ZERO,
        tombstone_after: Duration::from_secs(400 * 86_400),
        batch_size: 100,
        batch_pause: Duration::ZERO,
        vacuum: false,
    };
    run_retention_once(
        h.store.as_ref(),
        &settings,
        Utc::now() + chrono::Duration::seconds(1),
    )
    .await
    .unwrap();
}

/// Evil supplies acme's custom key, acme's derived default key and acme's stored key as its
/// own: every one reaches the provider as a different key, each tenant gets its own effect
/// and reference, and acme's refund happens.
async fn another_tenants_key_is_never_shared(t: &TestDb) {
    let h = Harness::new(t).await;
    let custom = h
        .enqueue(refund("acme", "op-c", 10).with_idempotency_key("refund-order-7"))
        .await;
    let derived = h.enqueue(refund("acme", "op-d", 20)).await;
    let acme_default = outboxd::intent::default_idempotency_key(
        &"acme".to_owned().try_into().unwrap(),
        &"op-d".to_owned().try_into().unwrap(),
        &REFUND.to_owned().try_into().unwrap(),
    );
    let squats = [
        "refund-order-7".to_owned(),
        acme_default.as_str().to_owned(),
        derived.idempotency_key.clone(),
        custom.idempotency_key.clone(),
    ];
    let mut evil_keys = Vec::new();
    for (n, key) in squats.iter().enumerate() {
        let r = h
            .enqueue(refund("evil", &format!("evil-{n}"), 1).with_idempotency_key(key.clone()))
            .await;
        evil_keys.push(r.idempotency_key);
    }
    for key in &evil_keys {
        assert_ne!(key, &custom.idempotency_key);
        assert_ne!(key, &derived.idempotency_key);
    }
    h.dispatcher.drain().await.unwrap();
    for (receipt, amount) in [(&custom, 10), (&derived, 20)] {
        let effects = h.provider.effects_for_key(&receipt.idempotency_key);
        assert_eq!(effects.len(), 1, "acme's own effect");
        assert_eq!(effects[0].json().unwrap()["amount"], json!(amount));
        let row = h.intent(receipt.intent_id).await;
        assert_eq!(row.state, IntentState::Delivered);
        assert_eq!(
            row.provider_ref.as_deref(),
            Some(effects[0].reference.as_str())
        );
    }
    assert_eq!(h.provider.effect_count(), 6, "six intents, six effects");
    let references: std::collections::BTreeSet<String> = h
        .provider
        .effects()
        .into_iter()
        .map(|e| e.reference)
        .collect();
    assert_eq!(references.len(), 6);
}

/// A hand-written INSERT that supplies another tenant's stored key, and a digest of its own,
/// is keyed and digested by the database like any other.
#[tokio::test]
async fn hand_written_insert_cannot_squat_a_key_or_fake_a_digest() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let h = Harness::new(&t).await;
    let acme = h.enqueue(refund("acme", "op-1", 10)).await;
    let Database::Postgres(pool) = &t.db else {
        unreachable!()
    };
    sqlx::query(
        "INSERT INTO outbox_intents (tenant, operation_id, action, payload, payload_sha256, idempotency_key) \
         VALUES ('evil', 'op-1', $1, '{\"amount\": 1}', repeat('a', 64), $2)",
    )
    .bind(REFUND)
    .bind(&acme.idempotency_key)
    .execute(pool)
    .await
    .unwrap();
    let evil = h
        .store
        .find_intent(&tenant("evil"), &operation("op-1"))
        .await
        .unwrap()
        .unwrap();
    assert_ne!(evil.idempotency_key, acme.idempotency_key);
    let expected = NewIntent::new("evil", "op-1", REFUND, json!({"amount": 1}))
        .validate()
        .unwrap();
    assert_eq!(evil.payload_sha256, expected.digest.as_str());
}

/// The SQL function path: evil calls `outbox_enqueue` with acme's stored key.
#[tokio::test]
async fn sql_function_cannot_squat_a_key() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let h = Harness::new(&t).await;
    let acme = h.enqueue(refund("acme", "op-1", 10)).await;
    let Database::Postgres(pool) = &t.db else {
        unreachable!()
    };
    let key: String = sqlx::query_scalar(
        "SELECT idempotency_key FROM outbox_enqueue('evil', 'op-9', $1, '{\"amount\": 1}', 1, $2)",
    )
    .bind(REFUND)
    .bind(&acme.idempotency_key)
    .fetch_one(pool)
    .await
    .unwrap();
    assert_ne!(key, acme.idempotency_key);
}

/// (a) A plain INSERT that supplies the key and the digest (so no trigger had to fill
/// them) is refused for an operation whose tombstone exists.
async fn plain_insert_cannot_revive_a_pruned_operation(t: &TestDb) {
    let h = Harness::new(t).await;
    let first = h.enqueue(refund("acme", "op-p", 5)).await;
    h.dispatcher.drain().await.unwrap();
    prune_all(&h).await;
    assert!(h
        .store
        .find_tombstone(&tenant("acme"), &operation("op-p"))
        .await
        .unwrap()
        .is_some());
    let digest = refund("acme", "op-p", 5).validate().unwrap().digest;
    let refused = match &t.db {
        Database::Postgres(pool) => sqlx::query(
            "INSERT INTO outbox_intents (tenant, operation_id, action, payload, payload_sha256, idempotency_key) \
             VALUES ('acme', 'op-p', $1, '{\"amount\": 5, \"tenant\": \"acme\"}', $2, $3)",
        )
        .bind(REFUND)
        .bind(digest.as_str())
        .bind(&first.idempotency_key)
        .execute(pool)
        .await
        .map(|_| ()),
        Database::Sqlite(pool) => sqlx::query(
            "INSERT INTO outbox_intents (tenant, operation_id, action, payload, payload_sha256, \
             idempotency_key, next_attempt_at, created_at, updated_at) \
             VALUES ('acme', 'op-p', ?1, '{\"amount\": 5, \"tenant\": \"acme\"}', ?2, ?3, 0, 0, 0)",
        )
        .bind(REFUND)
        .bind(digest.as_str())
        .bind(&first.idempotency_key)
        .execute(pool)
        .await
        .map(|_| ()),
    };
    let err = refused.expect_err("a pruned operation must not be recorded again");
    assert!(err.to_string().contains("already recorded"), "{err}");
    assert_eq!(
        scalar(&h.db, "SELECT count(*) FROM outbox_intents").await,
        0
    );
    h.dispatcher.drain().await.unwrap();
    assert_eq!(h.provider.effects_for_key(&first.idempotency_key).len(), 1);
}

/// A session's temporary table named like the tombstone table does not hide the
/// tombstone from the trigger (its search_path is pinned, pg_temp last).
#[tokio::test]
async fn a_temporary_table_cannot_hide_a_tombstone() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let h = Harness::new(&t).await;
    h.enqueue(refund("acme", "op-t", 5)).await;
    h.dispatcher.drain().await.unwrap();
    prune_all(&h).await;
    let Database::Postgres(pool) = &t.db else {
        unreachable!()
    };
    let mut conn = pool.acquire().await.unwrap();
    sqlx::query("CREATE TEMP TABLE outbox_tombstones (tenant text, operation_id text)")
        .execute(&mut *conn)
        .await
        .unwrap();
    let err = sqlx::query(
        "INSERT INTO outbox_intents (tenant, operation_id, action, payload) \
         VALUES ('acme', 'op-t', 'issue_refund', '{}')",
    )
    .execute(&mut *conn)
    .await
    .expect_err("the real tombstone still answers");
    assert!(err.to_string().contains("already recorded"), "{err}");
    sqlx::query("DROP TABLE pg_temp.outbox_tombstones")
        .execute(&mut *conn)
        .await
        .unwrap();
}

/// (b) An INSERT that races the prune of the same operation waits on the unique index while
/// the prune is held open, and is refused once the prune commits (its check runs after
/// the wait, on a new snapshot). Driven deterministically: the prune is a transaction this
/// test holds open until the INSERT is seen waiting on its lock.
#[tokio::test]
async fn insert_racing_the_prune_of_its_operation_is_refused() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let h = Harness::new(&t).await;
    let first = h.enqueue(refund("acme", "op-race", 5)).await;
    h.dispatcher.drain().await.unwrap();
    let Database::Postgres(pool) = &t.db else {
        unreachable!()
    };
    for via_function in [false, true] {
        if via_function {
            // Again, for the SQL function: a new delivered intent to prune.
            sqlx::query("DELETE FROM outbox_tombstones")
                .execute(pool)
                .await
                .unwrap();
            h.enqueue(refund("acme", "op-race", 5)).await;
            h.dispatcher.drain().await.unwrap();
        }
        let mut prune = pool.begin().await.unwrap();
        sqlx::query(
            "INSERT INTO outbox_tombstones (tenant, operation_id, intent_id, action, payload_sha256, \
             idempotency_key, final_state, provider_ref, finished_at, pruned_at) \
             SELECT tenant, operation_id, id, action, payload_sha256, idempotency_key, state, \
             provider_ref, finished_at, now() FROM outbox_intents WHERE operation_id = 'op-race'",
        )
        .execute(&mut *prune)
        .await
        .unwrap();
        sqlx::query("DELETE FROM outbox_intents WHERE operation_id = 'op-race'")
            .execute(&mut *prune)
            .await
            .unwrap();
        let racer_pool = pool.clone();
        let racer = tokio::spawn(async move {
            let sql = if via_function {
                "SELECT intent_id FROM outbox_enqueue('acme', 'op-race', 'issue_refund', '{\"amount\": 5, \"tenant\": \"acme\"}')"
            } else {
                "INSERT INTO outbox_intents (tenant, operation_id, action, payload) \
                 VALUES ('acme', 'op-race', 'issue_refund', '{\"amount\": 5, \"tenant\": \"acme\"}') RETURNING id"
            };
            sqlx::query_scalar::<_, i64>(AssertSqlSafe(sql))
                .fetch_one(&racer_pool)
                .await
        });
        // Wait until the INSERT is blocked on the prune's row lock (deadline, no sleep-and-hope).
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
                 AND query LIKE '%op-race%' AND pid <> pg_backend_pid()",
            )
            .fetch_one(pool)
            .await
            .unwrap();
            if waiting > 0 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the INSERT never waited on the prune"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        prune.commit().await.unwrap();
        let result = racer.await.unwrap();
        let err = result.expect_err("the racing INSERT must be refused");
        assert!(err.to_string().contains("already recorded"), "{err}");
        assert_eq!(
            scalar(&h.db, "SELECT count(*) FROM outbox_intents").await,
            0
        );
        // Asked again, the function answers from the tombstone.
        if via_function {
            let replayed: bool = sqlx::query_scalar(
                "SELECT replayed FROM outbox_enqueue('acme', 'op-race', 'issue_refund', '{\"amount\": 5, \"tenant\": \"acme\"}')",
            )
            .fetch_one(pool)
            .await
            .unwrap();
            assert!(replayed);
        }
    }
    h.dispatcher.drain().await.unwrap();
    assert_eq!(h.provider.effects_for_key(&first.idempotency_key).len(), 1);
}

const EXACT_PAYLOAD: &str = r#"{"amount": 1.234567890123456789, "big": 123456789012345678901234567890, "above_2_53": 9007199254740993, "tiny": 0.000000000000000000000000000001}"#;

/// Every number reaches the provider, the store and the admin JSON exactly as stored.
async fn numbers_reach_the_provider_exactly(t: &TestDb) {
    let h = Harness::new(t).await;
    let payload: serde_json::Value = serde_json::from_str(EXACT_PAYLOAD).unwrap();
    let r = h
        .enqueue(NewIntent::new("acme", "op-n", REFUND, payload))
        .await;
    h.dispatcher.drain().await.unwrap();
    let effects = h.provider.effects_for_key(&r.idempotency_key);
    assert_eq!(effects.len(), 1);
    let body = String::from_utf8(effects[0].body.to_vec()).unwrap();
    for exact in [
        "1.234567890123456789",
        "123456789012345678901234567890",
        "9007199254740993",
    ] {
        assert!(
            body.contains(exact),
            "{exact} missing from the request body {body}"
        );
    }
    let tiny = ["0.000000000000000000000000000001", "1e-30", "1E-30"];
    assert!(tiny.iter().any(|t| body.contains(t)), "{body}");
    let row = h.intent(r.intent_id).await;
    let shown = serde_json::to_string(&row.payload).unwrap();
    assert!(shown.contains("1.234567890123456789"), "{shown}");
    assert!(shown.contains("123456789012345678901234567890"), "{shown}");
}

/// The same big number through the Rust enqueue and the SQL function is one operation (a
/// replay), in either order.
#[tokio::test]
async fn rust_and_sql_enqueue_agree_on_big_numbers() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let h = Harness::new(&t).await;
    let Database::Postgres(pool) = &t.db else {
        unreachable!()
    };
    for (n, text) in [
        r#"{"a": 9007199254740993.0}"#,
        r#"{"a": 1.234567890123456789}"#,
        r#"{"a": 12345678901234567890123e-3, "b": 1E+2}"#,
    ]
    .iter()
    .enumerate()
    {
        let payload: serde_json::Value = serde_json::from_str(text).unwrap();
        let rust_first = format!("rust-{n}");
        h.enqueue(NewIntent::new("acme", &rust_first, REFUND, payload.clone()))
            .await;
        let replayed: bool = sqlx::query_scalar(
            "SELECT replayed FROM outbox_enqueue('acme', $1, $2, $3::text::jsonb)",
        )
        .bind(&rust_first)
        .bind(REFUND)
        .bind(text)
        .fetch_one(pool)
        .await
        .unwrap_or_else(|e| panic!("{text}: {e}"));
        assert!(replayed, "{text}");
        let sql_first = format!("sql-{n}");
        sqlx::query("SELECT * FROM outbox_enqueue('acme', $1, $2, $3::text::jsonb)")
            .bind(&sql_first)
            .bind(REFUND)
            .bind(text)
            .execute(pool)
            .await
            .unwrap();
        let again = h
            .enqueue(NewIntent::new("acme", &sql_first, REFUND, payload))
            .await;
        assert!(again.replayed, "{text}");
    }
}

both_backends!(
    another_tenants_key_is_never_shared,
    plain_insert_cannot_revive_a_pruned_operation,
    numbers_reach_the_provider_exactly,
);

/// REPEATABLE READ and SERIALIZABLE keep the transaction's snapshot: a prune that committed
/// after it was taken (here: before the INSERT even began, no race needed) is invisible to
/// the tombstone check. The INSERT, plain or through the function, must still fail (40001),
/// and the retried transaction is answered from the tombstone; a fresh operation in the same
/// isolation is recorded and leaves no placeholder behind.
#[tokio::test]
async fn snapshot_isolation_cannot_revive_an_operation_pruned_after_its_snapshot() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let h = Harness::new(&t).await;
    let Database::Postgres(pool) = &t.db else {
        unreachable!()
    };
    let payload = r#"{"amount": 5, "tenant": "acme"}"#;
    let mut n = 0;
    for isolation in ["REPEATABLE READ", "SERIALIZABLE"] {
        for via_function in [false, true] {
            n += 1;
            let op = format!("op-snap-{n}");
            let first = h.enqueue(refund("acme", &op, 5)).await;
            h.dispatcher.drain().await.unwrap();
            let mut tx = pool.begin().await.unwrap();
            sqlx::query(AssertSqlSafe(format!(
                "SET TRANSACTION ISOLATION LEVEL {isolation}"
            )))
            .execute(&mut *tx)
            .await
            .unwrap();
            // The snapshot is taken here, while the delivered intent still exists.
            sqlx::query("SELECT count(*) FROM outbox_attempts")
                .execute(&mut *tx)
                .await
                .unwrap();
            prune_all(&h).await;
            let sql = if via_function {
                "SELECT intent_id FROM outbox_enqueue('acme', $1, 'issue_refund', $2::text::jsonb)"
            } else {
                "INSERT INTO outbox_intents (tenant, operation_id, action, payload) \
                 VALUES ('acme', $1, 'issue_refund', $2::text::jsonb) RETURNING id"
            };
            let result = sqlx::query_scalar::<_, i64>(AssertSqlSafe(sql))
                .bind(&op)
                .bind(payload)
                .fetch_one(&mut *tx)
                .await;
            // Ended before asserting, so a failure does not leave the schema locked.
            tx.rollback().await.unwrap();
            let err = result.expect_err(&format!(
                "{isolation}, function {via_function}: a pruned operation must not be recorded again"
            ));
            let code = err
                .as_database_error()
                .and_then(|e| e.code())
                .map(|c| c.into_owned());
            assert_eq!(code.as_deref(), Some("40001"), "{isolation}: {err}");
            let replayed: bool = sqlx::query_scalar(
                "SELECT replayed FROM outbox_enqueue('acme', $1, 'issue_refund', $2::text::jsonb)",
            )
            .bind(&op)
            .bind(payload)
            .fetch_one(pool)
            .await
            .unwrap();
            assert!(
                replayed,
                "{isolation}: the retry is answered from the tombstone"
            );
            assert_eq!(
                scalar(&h.db, "SELECT count(*) FROM outbox_intents").await,
                0,
                "{isolation}, function {via_function}"
            );
            h.dispatcher.drain().await.unwrap();
            assert_eq!(h.provider.effects_for_key(&first.idempotency_key).len(), 1);
        }
        // A new operation in the same isolation is recorded, and leaves no placeholder.
        let tombstones = scalar(&h.db, "SELECT count(*) FROM outbox_tombstones").await;
        let mut tx = pool.begin().await.unwrap();
        sqlx::query(AssertSqlSafe(format!(
            "SET TRANSACTION ISOLATION LEVEL {isolation}"
        )))
        .execute(&mut *tx)
        .await
        .unwrap();
        let fresh = format!("op-fresh-{isolation}");
        sqlx::query(
            "INSERT INTO outbox_intents (tenant, operation_id, action, payload) \
             VALUES ('acme', $1, 'issue_refund', '{}')",
        )
        .bind(&fresh)
        .execute(&mut *tx)
        .await
        .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(
            scalar(&h.db, "SELECT count(*) FROM outbox_tombstones").await,
            tombstones
        );
        assert!(h
            .store
            .find_intent(&tenant("acme"), &operation(&fresh))
            .await
            .unwrap()
            .is_some());
        sqlx::query("DELETE FROM outbox_intents")
            .execute(pool)
            .await
            .unwrap();
    }
}

/// Migration 0003 replaces the producer functions in place: privileges an operator set on
/// the 0002 functions (EXECUTE revoked from PUBLIC, granted to producer roles) survive.
#[tokio::test]
async fn upgrade_keeps_the_privileges_set_on_the_producer_functions() {
    let Some(t) = TestDb::postgres_at(2).await else {
        return;
    };
    let Database::Postgres(pool) = &t.db else {
        unreachable!()
    };
    for f in ["outbox_enqueue", "outbox_enqueue_prehashed"] {
        sqlx::query(AssertSqlSafe(format!(
            "DO $$ BEGIN EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', '{f}'::regproc::regprocedure); END $$"
        )))
        .execute(pool)
        .await
        .unwrap();
    }
    t.db.migrate().await.expect("upgrade to the current schema");
    for f in ["outbox_enqueue", "outbox_enqueue_prehashed"] {
        let acl: Option<String> = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT proacl::text FROM pg_proc WHERE oid = '{f}'::regproc"
        )))
        .fetch_one(pool)
        .await
        .unwrap();
        let acl = acl.expect("an explicit ACL (NULL would mean PUBLIC may execute)");
        assert!(
            !acl.contains("{=X") && !acl.contains(",=X"),
            "{f}: PUBLIC may execute again after the upgrade: {acl}"
        );
    }
}

/// A producer built with this version against a PostgreSQL schema older than 0003 (the
/// function has the same signature there) would record a key any tenant can squat: the
/// enqueue is refused instead, as on SQLite without the secret.
#[tokio::test]
async fn enqueue_refuses_a_schema_without_namespaced_keys() {
    let Some(t) = TestDb::postgres_at(2).await else {
        return;
    };
    let Database::Postgres(pool) = &t.db else {
        unreachable!()
    };
    let mut tx = pool.begin().await.unwrap();
    let result = outboxd::enqueue(&mut tx, refund("acme", "op-old", 5)).await;
    tx.rollback().await.unwrap();
    let err = result.expect_err("a key that is not namespaced must not be recorded");
    assert!(
        matches!(err, outboxd::EnqueueError::KeySecret(_)),
        "{err:?}"
    );
    assert!(err.to_string().contains("0003"), "{err}");
}

/// An aggregate `current_setting(unknown)` planted in outboxd's schema, as a role that may
/// create objects there could: it outbids the built-in for any call with an untyped
/// literal (the tombstone trigger's `current_setting('transaction_isolation')`), and its
/// final function records each time it runs, and as whom (PostgreSQL).
pub(crate) const PLANT_CURRENT_SETTING: [&str; 3] = [
    "CREATE TABLE planted_calls (f text)",
    "CREATE FUNCTION planted_final(n bigint) RETURNS text LANGUAGE plpgsql AS \
     $$ BEGIN INSERT INTO planted_calls VALUES ('current_setting as ' || current_user); \
     RETURN 'read committed'; END $$",
    "CREATE AGGREGATE current_setting(unknown) (sfunc = pg_catalog.int8inc_any, \
     stype = bigint, initcond = '0', finalfunc = planted_final)",
];

/// Functions planted in outboxd's schema by a role that may create objects there (every
/// role may in `public` on PostgreSQL 14 and older) whose parameter types match the
/// built-ins' calls more closely (`convert_to(text, text)` for `convert_to(text, name)`,
/// `to_jsonb(text)` for `to_jsonb(anyelement)`, an aggregate `current_setting(unknown)` for
/// a call with a literal) never run inside the SECURITY DEFINER INSERT triggers, the key
/// functions or `outbox_enqueue`, whatever the path (migrations 0010 and 0011): the digest
/// and the keys are the ones Rust computes.
#[tokio::test]
async fn functions_planted_in_the_schema_never_run_for_an_insert() {
    use outboxd::intent::default_idempotency_key;
    use outboxd::wire_key::{wire_idempotency_key, KeySecret};

    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let h = Harness::new(&t).await;
    let Database::Postgres(pool) = &t.db else {
        unreachable!()
    };
    for sql in [
        "CREATE TABLE planted_calls (f text)",
        "CREATE FUNCTION convert_to(t text, enc text) RETURNS bytea LANGUAGE plpgsql AS \
         $$ BEGIN INSERT INTO planted_calls VALUES ('convert_to'); \
         RETURN pg_catalog.convert_to(t, enc::name); END $$",
        "CREATE FUNCTION to_jsonb(t text) RETURNS jsonb LANGUAGE plpgsql AS \
         $$ BEGIN INSERT INTO planted_calls VALUES ('to_jsonb'); \
         RETURN pg_catalog.to_jsonb(t); END $$",
    ]
    .into_iter()
    .chain(PLANT_CURRENT_SETTING.into_iter().skip(1))
    {
        sqlx::query(AssertSqlSafe(sql)).execute(pool).await.unwrap();
    }
    // The plants do win an unqualified call made with this schema's search_path.
    sqlx::query(
        "SELECT convert_to('a', 'UTF8'), to_jsonb('a'::text), \
                current_setting('transaction_isolation')",
    )
    .execute(pool)
    .await
    .unwrap();
    assert_eq!(scalar(&h.db, "SELECT count(*) FROM planted_calls").await, 3);
    sqlx::query("DELETE FROM planted_calls")
        .execute(pool)
        .await
        .unwrap();

    // A session keeps the plans its functions made, with the functions they resolved then:
    // new sessions, so that the calls below are resolved with the plants in place.
    let fresh = t.reopen(1).await;
    let Database::Postgres(fresh_pool) = &fresh else {
        unreachable!()
    };
    let rust = support::harness::enqueue_committed(&fresh, refund("acme", "op-rust", 1)).await;
    sqlx::query("SELECT * FROM outbox_enqueue('acme', 'op-sql', $1, '{\"amount\": 2, \"tenant\": \"acme\"}')")
        .bind(REFUND)
        .execute(fresh_pool)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO outbox_intents (tenant, operation_id, action, payload) \
         VALUES ('acme', 'op-plain', $1, '{\"amount\": 3, \"tenant\": \"acme\"}')",
    )
    .bind(REFUND)
    .execute(fresh_pool)
    .await
    .unwrap();
    assert_eq!(
        scalar(&h.db, "SELECT count(*) FROM planted_calls").await,
        0,
        "a planted function ran for an INSERT"
    );

    let secret: String = sqlx::query_scalar("SELECT key_secret FROM outboxd_installation")
        .fetch_one(pool)
        .await
        .unwrap();
    let secret = KeySecret::from_hex(&secret).unwrap();
    for (op, amount) in [("op-rust", 1), ("op-sql", 2), ("op-plain", 3)] {
        let row = h
            .store
            .find_intent(&tenant("acme"), &operation(op))
            .await
            .unwrap()
            .unwrap();
        let valid = refund("acme", op, amount).validate().unwrap();
        assert_eq!(row.payload_sha256, valid.digest.as_str(), "{op}");
        let key = wire_idempotency_key(
            &secret,
            &tenant("acme"),
            &default_idempotency_key(&tenant("acme"), &operation(op), &valid.action),
        );
        assert_eq!(row.idempotency_key.as_str(), key.as_str(), "{op}");
    }
    assert_eq!(
        rust.idempotency_key,
        h.intent(rust.intent_id).await.idempotency_key.as_str()
    );
}

/// Roles other than the owner that may create objects in outboxd's schema can plant
/// functions the SECURITY DEFINER triggers would call (an aggregate whose argument is
/// `unknown` outbids a built-in called with a literal, for one): `outboxd migrate` (and
/// the daemon's start, through the same check) names them and the statement that stops it.
#[tokio::test]
async fn migrate_warns_when_other_roles_may_create_in_the_schema() {
    use support::cli::Cli;

    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let cli = Cli::new(&t);
    let (_, stderr) = cli.exits(&["migrate"], 0).await;
    assert!(!stderr.contains("may create objects"), "{stderr}");
    assert_eq!(t.db.schema_creators().await.unwrap(), Vec::<String>::new());
    let Database::Postgres(pool) = &t.db else {
        unreachable!()
    };
    sqlx::query(
        "DO $$ BEGIN EXECUTE format('GRANT CREATE ON SCHEMA %I TO PUBLIC', current_schema()); END $$",
    )
    .execute(pool)
    .await
    .unwrap();
    assert_eq!(t.db.schema_creators().await.unwrap(), vec!["PUBLIC"]);
    let (_, stderr) = cli.exits(&["migrate"], 0).await;
    assert!(
        stderr.contains(
            "warning: roles other than its owner may create objects in outboxd's schema (PUBLIC)"
        ) && stderr.contains("REVOKE CREATE ON SCHEMA <schema> FROM PUBLIC"),
        "{stderr}"
    );
}

/// `outbox_enqueue` names outboxd's tables and functions with their schema (migration
/// 0011): a producer whose search_path does not hold outboxd's schema calls it by its
/// qualified name, and it records the intent with the digest and key it always had.
#[tokio::test]
async fn enqueue_by_its_qualified_name_needs_no_search_path() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let h = Harness::new(&t).await;
    let Database::Postgres(pool) = &t.db else {
        unreachable!()
    };
    let schema: String = sqlx::query_scalar("SELECT quote_ident(current_schema())")
        .fetch_one(pool)
        .await
        .unwrap();
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("SET LOCAL search_path = pg_catalog")
        .execute(&mut *tx)
        .await
        .unwrap();
    let (id, key): (i64, String) = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT intent_id, idempotency_key FROM {schema}.outbox_enqueue('acme', 'op-qualified', \
         $1, '{{\"amount\": 4, \"tenant\": \"acme\"}}')"
    )))
    .bind(REFUND)
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let row = h.intent(outboxd::intent::IntentId::new(id)).await;
    let valid = refund("acme", "op-qualified", 4).validate().unwrap();
    assert_eq!(row.payload_sha256, valid.digest.as_str());
    assert_eq!(row.idempotency_key.as_str(), key);
    let again = h.enqueue(refund("acme", "op-qualified", 4)).await;
    assert!(again.replayed && again.intent_id.get() == id, "{again:?}");
}

/// A producer needs no CREATE on any schema for this one: PostgreSQL lets every role
/// create objects in its own temporary schema, and PL/pgSQL resolves the types of a
/// function's variables once per session, on the search_path of its first call. A domain
/// `pg_temp.text` whose CHECK calls the producer's own function, put ahead of pg_catalog
/// for one direct call of `outbox_canonical_json` (which has no path of its own), would
/// otherwise run inside the SECURITY DEFINER trigger on every later INSERT of that
/// session, with the owner's rights (migration 0011 names the variable's type by schema).
#[tokio::test]
async fn a_text_domain_in_pg_temp_never_runs_inside_the_triggers() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let h = Harness::new(&t).await;
    let Database::Postgres(pool) = &t.db else {
        unreachable!()
    };
    sqlx::query("CREATE TABLE planted_calls (f text)")
        .execute(pool)
        .await
        .unwrap();
    let schema: String = sqlx::query_scalar("SELECT quote_ident(current_schema())")
        .fetch_one(pool)
        .await
        .unwrap();
    // One session for all of it: pg_temp and the compiled functions are per session.
    let mut conn = pool.acquire().await.unwrap();
    for sql in [
        format!(
            "CREATE FUNCTION pg_temp.planted_check(t pg_catalog.text) RETURNS pg_catalog.bool \
             LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS \
             $$ BEGIN INSERT INTO {schema}.planted_calls VALUES ('domain check as ' || current_user); \
             RETURN true; END $$"
        ),
        "CREATE DOMAIN pg_temp.text AS pg_catalog.text CHECK (pg_temp.planted_check(VALUE))"
            .to_owned(),
        "SET search_path = pg_temp, pg_catalog".to_owned(),
        format!("SELECT {schema}.outbox_canonical_json('{{\"a\": 1}}'::pg_catalog.jsonb, 1)"),
        format!("SET search_path = {schema}"),
    ] {
        sqlx::query(AssertSqlSafe(sql)).execute(&mut *conn).await.unwrap();
    }
    sqlx::query("DELETE FROM planted_calls")
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO outbox_intents (tenant, operation_id, action, payload) \
         VALUES ('acme', 'op-domain', $1, '{\"amount\": 5, \"tenant\": \"acme\"}')",
    )
    .bind(REFUND)
    .execute(&mut *conn)
    .await
    .unwrap();
    sqlx::query(
        "SELECT * FROM outbox_enqueue('acme', 'op-domain-fn', $1, '{\"amount\": 6}'::jsonb)",
    )
    .bind(REFUND)
    .execute(&mut *conn)
    .await
    .unwrap();
    let calls: Vec<String> = sqlx::query_scalar("SELECT f FROM planted_calls")
        .fetch_all(&mut *conn)
        .await
        .unwrap();
    // The pool must not hand this session, with its planted types, to anyone else.
    conn.detach();
    assert_eq!(
        calls,
        Vec::<String>::new(),
        "the planted domain ran for an INSERT"
    );
    let row = h
        .store
        .find_intent(&tenant("acme"), &operation("op-domain"))
        .await
        .unwrap()
        .unwrap();
    let valid = refund("acme", "op-domain", 5).validate().unwrap();
    assert_eq!(row.payload_sha256, valid.digest.as_str());
}

/// The two SECURITY DEFINER trigger functions fire for outboxd's own triggers only. A
/// producer that could attach one to a temporary table of its own (every role may create
/// one, with column types of its own) would run its code with the owner's rights: a
/// domain's CHECK on a column the function assigns runs inside it, and the function is an
/// oracle for the wire-key secret. PUBLIC may not attach them (CREATE TRIGGER checks
/// EXECUTE; firing outboxd's triggers does not), and each refuses to run for any other
/// table, for a role that was granted EXECUTE all the same.
#[tokio::test]
async fn the_definer_triggers_refuse_a_table_of_the_producer() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let h = Harness::new(&t).await;
    let Database::Postgres(pool) = &t.db else {
        unreachable!()
    };
    let schema: String = sqlx::query_scalar("SELECT quote_ident(current_schema())")
        .fetch_one(pool)
        .await
        .unwrap();
    // Roles are the server's; this one is shared by every run and has no login.
    for sql in [
        "DO $$ BEGIN CREATE ROLE outboxd_it_producer NOLOGIN; \
         EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$"
            .to_owned(),
        format!("GRANT USAGE ON SCHEMA {schema} TO outboxd_it_producer"),
        format!("GRANT INSERT ON {schema}.outbox_intents TO outboxd_it_producer"),
    ] {
        sqlx::query(AssertSqlSafe(sql)).execute(pool).await.unwrap();
    }
    let mut conn = pool.acquire().await.unwrap();
    for sql in [
        "SET ROLE outboxd_it_producer",
        "CREATE FUNCTION pg_temp.planted(t pg_catalog.text) RETURNS pg_catalog.bool \
         LANGUAGE plpgsql AS $$ BEGIN \
         PERFORM pg_catalog.set_config('outboxd_it.ran_as', current_user::text, false); \
         RETURN true; END $$",
        "CREATE DOMAIN pg_temp.planted_text AS pg_catalog.text CHECK (pg_temp.planted(VALUE))",
        "CREATE TEMP TABLE bait (id bigint, tenant text, operation_id text, action text, \
         payload_version int, payload jsonb, payload_sha256 pg_temp.planted_text, \
         idempotency_key pg_temp.planted_text, requested_idempotency_key text, \
         ordering_key text)",
    ] {
        sqlx::query(sql).execute(&mut *conn).await.unwrap();
    }
    let attach = |f: &str| {
        format!(
            "CREATE TRIGGER bait_{f} BEFORE INSERT ON pg_temp.bait FOR EACH ROW \
             EXECUTE FUNCTION {schema}.{f}()"
        )
    };
    let bait = "INSERT INTO pg_temp.bait (id, tenant, operation_id, action, payload_version, \
                payload) VALUES (1, 'acme', 'op-bait', 'issue_refund', 1, '{\"a\": 1}')";
    let mut refusals = Vec::new();
    for f in [
        "outbox_intents_fill_defaults",
        "outbox_intents_refuse_pruned",
    ] {
        let denied = sqlx::query(AssertSqlSafe(attach(f)))
            .execute(&mut *conn)
            .await
            .expect_err("PUBLIC may attach the function to a table of its own");
        assert!(
            denied.to_string().contains("permission denied"),
            "{f}: {denied}"
        );
        // A role granted EXECUTE (GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA, say) may attach
        // it; the function then refuses to run for that table.
        sqlx::query("RESET ROLE").execute(&mut *conn).await.unwrap();
        sqlx::query(AssertSqlSafe(format!(
            "GRANT EXECUTE ON FUNCTION {schema}.{f}() TO outboxd_it_producer"
        )))
        .execute(&mut *conn)
        .await
        .unwrap();
        sqlx::query("SET ROLE outboxd_it_producer")
            .execute(&mut *conn)
            .await
            .unwrap();
        sqlx::query(AssertSqlSafe(attach(f)))
            .execute(&mut *conn)
            .await
            .unwrap();
        let refused = sqlx::query(bait)
            .execute(&mut *conn)
            .await
            .expect_err("the trigger function ran for the producer's table");
        refusals.push(refused.to_string());
        sqlx::query(AssertSqlSafe(format!(
            "DROP TRIGGER bait_{f} ON pg_temp.bait"
        )))
        .execute(&mut *conn)
        .await
        .unwrap();
    }
    let ran_as: Option<String> =
        sqlx::query_scalar("SELECT current_setting('outboxd_it.ran_as', true)")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
    // The pool must not hand this session, with its role and planted types, to anyone else.
    conn.detach();
    assert!(
        ran_as.as_deref().unwrap_or("").is_empty(),
        "the planted domain ran inside the trigger function as {ran_as:?}"
    );
    for refused in &refusals {
        assert!(refused.contains("outbox_intents"), "{refused}");
    }
    // outboxd's own triggers still fire for the producer, which gets its digest and key.
    let producer = t.pool_as_role("outboxd_it_producer", 1).await;
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO {schema}.outbox_intents (tenant, operation_id, action, payload) \
         VALUES ('acme', 'op-producer', $1, '{{\"amount\": 7, \"tenant\": \"acme\"}}')"
    )))
    .bind(REFUND)
    .execute(&producer)
    .await
    .unwrap();
    producer.close().await;
    let row = h
        .store
        .find_intent(&tenant("acme"), &operation("op-producer"))
        .await
        .unwrap()
        .unwrap();
    let valid = refund("acme", "op-producer", 7).validate().unwrap();
    assert_eq!(row.payload_sha256, valid.digest.as_str());
}
