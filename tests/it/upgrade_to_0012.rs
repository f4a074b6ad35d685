//! Schema 11 → 12 (migration 0012 writes the producer and trigger functions again, with
//! the schema's name quoted by pg_catalog's own functions) with pending, in-flight and
//! unknown intents, on a PostgreSQL database whose trigger function carries what a
//! `quote_ident(name)` planted during 0011 could have spliced into it.

use crate::support;
use crate::upgrade::{
    all_outboxd_functions, derived_digests, derived_keys, dispatch_after_upgrade,
    record_at_schema_3,
};

use outboxd::store::Database;
use outboxd::NewIntent;
use serde_json::json;
use support::harness::{enqueue_committed, scalar, try_exec, Harness, REFUND};
use support::TestDb;

/// Each outboxd function's definition, as `pg_get_functiondef` prints it with the schema's
/// name written `@`.
async fn definitions(db: &Database, schema: &str) -> Vec<(String, String)> {
    let Database::Postgres(pool) = db else {
        unreachable!("a PostgreSQL test database")
    };
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid) \
           FROM pg_proc p WHERE p.pronamespace = current_schema()::regnamespace \
            AND p.proname LIKE 'outbox%' ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    rows.into_iter()
        .map(|(f, d)| (f.replace(schema, "@"), d.replace(schema, "@")))
        .collect()
}

/// Runs a new session's INSERT (a session keeps the plans its functions made): the number
/// of backdoor calls it caused.
async fn backdoor_calls_for_an_insert(t: &TestDb, h: &Harness, op: &str) -> i64 {
    try_exec(&h.db, "DELETE FROM planted_calls").await.unwrap();
    enqueue_committed(
        &t.reopen(1).await,
        NewIntent::new("acme", op, REFUND, json!({"op": op})),
    )
    .await;
    scalar(&h.db, "SELECT count(*) FROM planted_calls").await
}

/// On PostgreSQL every function ends exactly as a fresh install writes it (the spliced
/// call gone), with the same owner, privileges, flags and path, and the same digests and
/// keys. On SQLite nothing changes. The dispatcher then delivers each pending intent once
/// under its key and leaves the unknown one alone.
async fn upgrade_to_0012_then_dispatch(t: TestDb) {
    let h = Harness::new(&t).await;
    let ids = record_at_schema_3(&h).await;
    let postgres = matches!(h.db, Database::Postgres(_));
    let before = if postgres {
        let schema = t.schema().unwrap();
        try_exec(&h.db, "CREATE TABLE planted_calls (f text)")
            .await
            .unwrap();
        // What the spliced name could have made of the trigger: one more call, with the
        // owner's rights, on every INSERT.
        try_exec(
            &h.db,
            &format!(
                "DO $$ BEGIN EXECUTE pg_catalog.replace(\
                   pg_catalog.pg_get_functiondef('outbox_intents_fill_defaults()'::regprocedure), \
                   'PERFORM {schema}.outbox_check_intent_fields', \
                   'INSERT INTO {schema}.planted_calls VALUES (''backdoor as '' || current_user); \
                    PERFORM {schema}.outbox_check_intent_fields'); END $$"
            ),
        )
        .await
        .unwrap();
        assert_eq!(
            backdoor_calls_for_an_insert(&t, &h, "s11-tampered").await,
            1,
            "the tampered trigger runs the backdoor at schema 11"
        );
        Some((
            all_outboxd_functions(&h.db).await,
            derived_keys(&h.db).await,
            derived_digests(&h.db).await,
        ))
    } else {
        h.enqueue(NewIntent::new(
            "acme",
            "s11-tampered",
            REFUND,
            json!({"op": "s11-tampered"}),
        ))
        .await;
        None
    };

    let report = t.db.migrate().await.expect("upgrade to the current schema");
    assert_eq!(
        report.applied,
        vec![
            (12, "functions_written_with_qualified_quoting"),
            (13, "wakeups_can_be_turned_off"),
        ],
        "{report:?}"
    );
    assert_eq!(
        scalar(&h.db, "SELECT count(*) FROM outbox_intents").await,
        5
    );
    if let Some((functions, keys, digests)) = before {
        let schema = t.schema().unwrap();
        assert_eq!(all_outboxd_functions(&h.db).await, functions);
        assert_eq!(derived_keys(&h.db).await, keys, "the same keys after 0012");
        assert_eq!(
            derived_digests(&h.db).await,
            digests,
            "the same digests after 0012"
        );
        let fresh = TestDb::postgres().await.expect("PostgreSQL is up");
        assert_eq!(
            definitions(&h.db, schema).await,
            definitions(&fresh.db, fresh.schema().unwrap()).await,
            "every function as a fresh install writes it"
        );
        assert_eq!(
            backdoor_calls_for_an_insert(&t, &h, "s12-new").await,
            0,
            "the backdoor ran for an INSERT after 0012"
        );
    } else {
        h.enqueue(NewIntent::new(
            "acme",
            "s12-new",
            REFUND,
            json!({"op": "s12-new"}),
        ))
        .await;
    }

    dispatch_after_upgrade(&h, ids).await;
    assert_eq!(
        h.provider.effect_count(),
        5,
        "three old pending, the tampered-era one, the new one"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_to_0012_on_sqlite() {
    upgrade_to_0012_then_dispatch(TestDb::sqlite_at(11).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_to_0012_on_postgres() {
    let Some(t) = TestDb::postgres_at(11).await else {
        return;
    };
    upgrade_to_0012_then_dispatch(t).await;
}
