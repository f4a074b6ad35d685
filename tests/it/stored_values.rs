//! Values read back from the outbox tables are taken as stored: a row whose identity
//! fields the Rust rules would refuse (here a tenant with trailing whitespace and an
//! operation id with a tab, which pass every check the database itself makes on an
//! `UPDATE`) is listed, claimed and delivered like any other, and neither a listing nor a
//! claim batch fails for the rows around it. The rules the database keeps on the fields
//! only a producer writes still refuse a hand-written UPDATE that breaks one, by name,
//! leaving the row as it was; on PostgreSQL they run only when a statement writes one of
//! those fields (migration 0009), so the dispatcher's claims and outcomes never run them.

use crate::support;

use outboxd::intent::{IntentState, OperationId, TenantId};
use outboxd::store::Database;
use outboxd::store::{IntentFilter, IntentSearch, TenantScope};
use outboxd_testkit::{Fault, FaultRule, Matcher};
use sqlx::AssertSqlSafe;
use support::harness::{exec, scalar, try_exec, Harness, REFUND};
use support::TestDb;

const ODD_TENANT: &str = "acme ";
const ODD_OPERATION: &str = "op\tb";

async fn an_odd_stored_row_does_not_fail_its_neighbours(t: &TestDb) {
    assert!(TenantId::parse(ODD_TENANT).is_err() && OperationId::parse(ODD_OPERATION).is_err());
    let h = Harness::new(t).await;
    let a = h.enqueue_simple("op-a", REFUND).await;
    let b = h.enqueue_simple("op-b", REFUND).await;
    let c = h.enqueue_simple("op-c", REFUND).await;
    let odd = format!(
        "UPDATE outbox_intents SET tenant = '{ODD_TENANT}', operation_id = 'op' || char(9) || 'b' \
         WHERE id = {}",
        b.intent_id
    );
    exec(&h.db, &odd, &odd.replace("char(9)", "chr(9)")).await;

    let listed = h
        .store
        .list_intents(&IntentFilter {
            limit: 10,
            ..IntentFilter::default()
        })
        .await
        .expect("a listing with an odd row");
    let ids: Vec<_> = listed.iter().map(|i| i.id).collect();
    assert_eq!(ids, [a.intent_id, b.intent_id, c.intent_id]);
    assert_eq!(listed[1].tenant.as_str(), ODD_TENANT);
    assert_eq!(listed[1].operation_id.as_str(), ODD_OPERATION);

    let searched = h
        .store
        .search_intents(&IntentSearch {
            scope: TenantScope::All,
            action: None,
            state: None,
            created_from: None,
            created_to: None,
            q: None,
            before_id: None,
            limit: 10,
        })
        .await
        .expect("a console search with an odd row");
    assert_eq!(searched.len(), 3);

    let step = h
        .dispatcher
        .run_once()
        .await
        .expect("a claim batch with an odd row");
    assert_eq!((step.claimed, step.delivered), (3, 3), "{step:?}");
    for id in [a.intent_id, b.intent_id, c.intent_id] {
        assert_eq!(h.intent(id).await.state, IntentState::Delivered);
    }
    let found = h
        .store
        .find_intent(
            &TenantId::from_store(ODD_TENANT.to_owned()),
            &OperationId::from_store(ODD_OPERATION.to_owned()),
        )
        .await
        .unwrap()
        .expect("found by its stored identity");
    assert_eq!(found.id, b.intent_id);
}

/// Every field rule both backends keep, broken by a hand-written UPDATE: refused with the
/// rule's name (PostgreSQL: the constraint's; SQLite: its expression), the row unchanged,
/// and the intent then delivered as enqueued.
async fn a_hand_update_that_breaks_a_field_rule_is_refused(t: &TestDb) {
    let h = Harness::new(t).await;
    let a = h.enqueue_simple("op-a", REFUND).await;
    let id = a.intent_id;
    let before = h.intent(id).await;
    let broken = [
        (
            "tenant = ''",
            "outbox_intents_tenant_check",
            "length(tenant)",
        ),
        (
            "operation_id = ''",
            "outbox_intents_operation_id_check",
            "length(operation_id)",
        ),
        (
            "action = ''",
            "outbox_intents_action_check",
            "length(action)",
        ),
        (
            "payload_version = 0",
            "outbox_intents_payload_version_check",
            "payload_version",
        ),
        (
            "payload = '[1]'",
            "outbox_intents_payload_check",
            "json_type(payload)",
        ),
        (
            "payload_sha256 = 'abc'",
            "outbox_intents_payload_sha256_check",
            "length(payload_sha256)",
        ),
        (
            "idempotency_key = ''",
            "outbox_intents_idempotency_key_check",
            "length(idempotency_key)",
        ),
        (
            "ordering_key = ''",
            "outbox_intents_ordering_key_check",
            "length(ordering_key)",
        ),
        // Written together with a field the rules do not read.
        (
            "state = state, action = ''",
            "outbox_intents_action_check",
            "length(action)",
        ),
    ];
    for (set, postgres, sqlite) in broken {
        let err = try_exec(
            &h.db,
            &format!("UPDATE outbox_intents SET {set} WHERE id = {id}"),
        )
        .await
        .expect_err(set);
        let text = err.to_string();
        let named = match h.db {
            Database::Postgres(_) => {
                let code = err.as_database_error().and_then(|e| e.code());
                assert_eq!(code.as_deref(), Some("23514"), "{set}: {text}");
                text.contains(&format!("violates check constraint \"{postgres}\""))
            }
            Database::Sqlite(_) => {
                text.contains("CHECK constraint failed") && text.contains(sqlite)
            }
        };
        assert!(named, "{set}: {text}");
    }
    if let Database::Postgres(_) = h.db {
        // The rules PostgreSQL keeps beyond SQLite's, on the same path.
        for set in ["action = 'two words'", "payload_sha256 = repeat('G', 64)"] {
            let err = try_exec(
                &h.db,
                &format!("UPDATE outbox_intents SET {set} WHERE id = {id}"),
            )
            .await
            .expect_err(set);
            assert!(
                err.to_string().contains("violates check constraint"),
                "{set}: {err}"
            );
        }
    }
    let after = h.intent(id).await;
    assert_eq!(
        (
            &after.tenant,
            &after.operation_id,
            &after.action,
            &after.payload_sha256
        ),
        (
            &before.tenant,
            &before.operation_id,
            &before.action,
            &before.payload_sha256
        ),
        "nothing of a refused UPDATE stays"
    );
    h.dispatcher.drain().await.unwrap();
    assert_eq!(h.intent(id).await.state, IntentState::Delivered);
    assert_eq!(h.provider.effect_count(), 1);
}

both_backends!(
    an_odd_stored_row_does_not_fail_its_neighbours,
    a_hand_update_that_breaks_a_field_rule_is_refused
);

/// PostgreSQL: the dispatcher's claim and outcome statements never run the field rules
/// (they set none of those fields). A row that breaks one (written with the rules' trigger
/// switched off, as `session_replication_role = replica` would) is still claimed, retried
/// and delivered; with the rules as CHECK constraints (schema 8) its claim was refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dispatcher_updates_do_not_run_the_field_rules_on_postgres() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let h = Harness::new(&t).await;
    let a = h.enqueue_simple("op-a", REFUND).await;
    let id = a.intent_id;
    for sql in [
        "ALTER TABLE outbox_intents DISABLE TRIGGER outbox_intents_verify_fields".to_owned(),
        format!("UPDATE outbox_intents SET tenant = repeat('t', 129) WHERE id = {id}"),
        "ALTER TABLE outbox_intents ENABLE TRIGGER outbox_intents_verify_fields".to_owned(),
    ] {
        try_exec(&h.db, &sql).await.expect(&sql);
    }
    let stored = format!(
        "SELECT count(*) FROM outbox_intents WHERE char_length(tenant) = 129 AND id = {id}"
    );
    assert_eq!(
        scalar(&h.db, &stored).await,
        1,
        "the row breaks the tenant rule"
    );
    // The provider answers 503 first: the claim, a retryable outcome, a second claim and a
    // delivered outcome all update the row.
    h.provider.push_fault(FaultRule {
        matcher: Matcher::Key(a.idempotency_key.clone()),
        fault: Fault::StatusWithoutApply {
            status: 503,
            retry_after: None,
        },
        times: 1,
    });
    let step = h
        .dispatcher
        .run_once()
        .await
        .expect("a claim of a row that breaks a rule");
    assert_eq!((step.claimed, step.retried), (1, 1), "{step:?}");
    h.make_due().await;
    h.dispatcher
        .drain()
        .await
        .expect("claims and outcomes on a row that breaks a rule");
    let row = h.intent(id).await;
    assert_eq!(row.state, IntentState::Delivered, "{row:?}");
    assert_eq!(row.attempt_count, 2, "{row:?}");
}

/// Runs `statements` in one transaction on one PostgreSQL connection and returns the
/// error of the last one; the transaction is rolled back.
async fn refusal_in_one_transaction(db: &Database, statements: &[String]) -> sqlx::Error {
    let Database::Postgres(pool) = db else {
        unreachable!("a PostgreSQL test database")
    };
    let mut tx = pool.begin().await.unwrap();
    let (last, setup) = statements.split_last().expect("a statement");
    for sql in setup {
        sqlx::query(AssertSqlSafe(sql.as_str()))
            .execute(&mut *tx)
            .await
            .expect(sql);
    }
    let err = sqlx::query(AssertSqlSafe(last.as_str()))
        .execute(&mut *tx)
        .await
        .expect_err(last);
    tx.rollback().await.ok();
    err
}

fn sqlstate_and_constraint(err: &sqlx::Error) -> (Option<String>, Option<String>) {
    let db = err.as_database_error();
    (
        db.and_then(|e| e.code()).map(|c| c.into_owned()),
        db.and_then(|e| e.constraint()).map(str::to_owned),
    )
}

/// PostgreSQL: the field rules are not fooled by functions or operators of the caller's
/// schemas standing in for the built-ins they use (a CHECK is bound to the built-ins when
/// it is created; the rules' function pins its own search_path); a row that breaks
/// several rules names the one PostgreSQL's CHECKs named (their name order); a NULL in a
/// NOT NULL field is refused by the NOT NULL constraint, as before; and a BEFORE INSERT
/// trigger of one's own that fires between outboxd's two cannot store a broken field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_field_rules_report_as_the_checks_did_on_postgres() {
    let Some(t) = TestDb::postgres().await else {
        return;
    };
    let h = Harness::new(&t).await;
    let id = h.enqueue_simple("op-a", REFUND).await.intent_id;
    let schema: String = match &h.db {
        Database::Postgres(pool) => sqlx::query_scalar("SELECT current_schema()::text")
            .fetch_one(pool)
            .await
            .unwrap(),
        Database::Sqlite(_) => unreachable!(),
    };
    let shadow = format!("{schema}_shadow");
    let shadowed = [
        format!("CREATE SCHEMA \"{shadow}\""),
        format!(
            "CREATE FUNCTION \"{shadow}\".jsonb_typeof(jsonb) RETURNS text \
             LANGUAGE sql AS $$SELECT 'object'::text$$"
        ),
        format!(
            "CREATE FUNCTION \"{shadow}\".char_length(text) RETURNS integer \
             LANGUAGE sql AS $$SELECT 64$$"
        ),
        format!(
            "CREATE FUNCTION \"{shadow}\".always(text, text) RETURNS boolean \
             LANGUAGE sql AS $$SELECT true$$"
        ),
        format!(
            "CREATE OPERATOR \"{shadow}\".~ (LEFTARG = text, RIGHTARG = text, \
             FUNCTION = \"{shadow}\".always)"
        ),
        format!("SET LOCAL search_path = \"{shadow}\", pg_catalog, \"{schema}\""),
    ];
    for (set, rule) in [
        ("payload = '[]'", "outbox_intents_payload_check"),
        ("tenant = repeat('t', 500)", "outbox_intents_tenant_check"),
        ("action = 'two words'", "outbox_intents_action_check"),
        (
            "payload_sha256 = repeat('G', 64)",
            "outbox_intents_payload_sha256_check",
        ),
    ] {
        let mut statements = shadowed.to_vec();
        statements.push(format!("UPDATE outbox_intents SET {set} WHERE id = {id}"));
        let err = refusal_in_one_transaction(&h.db, &statements).await;
        assert_eq!(
            sqlstate_and_constraint(&err),
            (Some("23514".to_owned()), Some(rule.to_owned())),
            "{set} with shadowed built-ins: {err}"
        );
    }
    for (set, code, rule) in [
        (
            "tenant = '', action = 'bad action!', payload = '[]'",
            "23514",
            Some("outbox_intents_action_check"),
        ),
        (
            "tenant = '', payload_version = 0",
            "23514",
            Some("outbox_intents_payload_version_check"),
        ),
        ("tenant = NULL, payload = '[]'", "23502", None),
    ] {
        let statements = [format!("UPDATE outbox_intents SET {set} WHERE id = {id}")];
        let err = refusal_in_one_transaction(&h.db, &statements).await;
        let (got_code, got_rule) = sqlstate_and_constraint(&err);
        assert_eq!(got_code.as_deref(), Some(code), "{set}: {err}");
        if let Some(rule) = rule {
            assert_eq!(got_rule.as_deref(), Some(rule), "{set}: {err}");
        }
    }
    let between = [
        "CREATE FUNCTION pg_temp.rewrite_action() RETURNS trigger LANGUAGE plpgsql AS \
         $$BEGIN NEW.action := 'has space'; RETURN NEW; END$$"
            .to_owned(),
        "CREATE TRIGGER outbox_intents_g_rewrite BEFORE INSERT ON outbox_intents \
         FOR EACH ROW EXECUTE FUNCTION pg_temp.rewrite_action()"
            .to_owned(),
        "SELECT * FROM outbox_enqueue('acme', 'op-between', 'issue_refund', '{}')".to_owned(),
    ];
    let err = refusal_in_one_transaction(&h.db, &between).await;
    assert_eq!(
        sqlstate_and_constraint(&err),
        (
            Some("23514".to_owned()),
            Some("outbox_intents_action_check".to_owned())
        ),
        "{err}"
    );
    assert_eq!(
        scalar(&h.db, "SELECT count(*) FROM outbox_intents").await,
        1,
        "nothing refused stays"
    );
}
