//! Upgrading a database created by an earlier schema while intents are pending, pending
//! after an ambiguous attempt, in flight and unknown: migration 0003 namespaces the keys of
//! intents that never sent anything and keeps every key that may already have reached the
//! provider, on both backends; the dispatcher then delivers with those keys. Migration 0004
//! (the tenant walk's index), 0005 (the bytewise walk's index, the recorded may-act-twice
//! confirmations), 0006 (the published send window), 0007 (wake-ups that name their
//! schema), 0008 (the superseded tenant-walk index dropped on PostgreSQL), 0009 (the
//! field checks run only when a statement writes a field, PostgreSQL), 0010 (cheaper
//! producer functions, PostgreSQL) and 0011 (producer functions that search pg_catalog
//! only, PostgreSQL) carry the same kinds of rows forward.

use crate::support;

use outboxd::intent::{default_idempotency_key, IntentId, IntentState};
use outboxd::store::{Database, ResendApproval, Resolution, ResolutionKind, TenantScope};
use outboxd::NewIntent;
use serde_json::json;
use support::harness::{
    enqueue_committed, exec, operation, scalar, tenant, try_exec, Harness, REFUND,
};
use support::TestDb;

const OPS: [&str; 4] = ["op-fresh", "op-retry", "op-inflight", "op-unknown"];

fn old_key(op: &str) -> String {
    default_idempotency_key(
        &"acme".to_owned().try_into().unwrap(),
        &op.to_owned().try_into().unwrap(),
        &REFUND.to_owned().try_into().unwrap(),
    )
    .as_str()
    .to_owned()
}

fn payload(op: &str) -> serde_json::Value {
    json!({"op": op, "amount": 100})
}

/// Records the four intents as the 0002 schema did (old default keys, no namespacing).
async fn record_at_schema_2(db: &Database) {
    for op in OPS {
        let valid = NewIntent::new("acme", op, REFUND, payload(op))
            .validate()
            .unwrap();
        match db {
            Database::Postgres(pool) => {
                let key: String = sqlx::query_scalar(
                    "SELECT idempotency_key FROM outbox_enqueue('acme', $1, $2, $3)",
                )
                .bind(op)
                .bind(REFUND)
                .bind(sqlx::types::Json(payload(op)))
                .fetch_one(pool)
                .await
                .unwrap();
                assert_eq!(key, old_key(op), "0002 derived the unnamespaced key");
            }
            Database::Sqlite(pool) => {
                sqlx::query(
                    "INSERT INTO outbox_intents (tenant, operation_id, action, payload, payload_sha256, \
                     idempotency_key, next_attempt_at, created_at, updated_at) \
                     VALUES ('acme', ?1, ?2, ?3, ?4, ?5, 0, ?6, ?6)",
                )
                .bind(op)
                .bind(REFUND)
                .bind(payload(op).to_string())
                .bind(valid.digest.as_str())
                .bind(old_key(op))
                .bind(chrono::Utc::now().timestamp_millis())
                .execute(pool)
                .await
                .unwrap();
            }
        }
    }
    exec(
        db,
        "UPDATE outbox_intents SET attempt_count = 1, ambiguous_attempts = 1, first_sent_at = 1 \
         WHERE operation_id IN ('op-retry', 'op-inflight', 'op-unknown')",
        "UPDATE outbox_intents SET attempt_count = 1, ambiguous_attempts = 1, first_sent_at = now() \
         WHERE operation_id IN ('op-retry', 'op-inflight', 'op-unknown')",
    )
    .await;
    exec(
        db,
        "UPDATE outbox_intents SET state = 'in_flight', lease_owner = 'old-binary', \
         lease_expires_at = 1, attempt_started_at = 1, fencing_token = 1 WHERE operation_id = 'op-inflight'",
        "UPDATE outbox_intents SET state = 'in_flight', lease_owner = 'old-binary', \
         lease_expires_at = now() - interval '1 second', attempt_started_at = now(), fencing_token = 1 \
         WHERE operation_id = 'op-inflight'",
    )
    .await;
    exec(
        db,
        "UPDATE outbox_intents SET state = 'unknown' WHERE operation_id = 'op-unknown'",
        "UPDATE outbox_intents SET state = 'unknown' WHERE operation_id = 'op-unknown'",
    )
    .await;
    // SQLite's placeholder time 1 (ms after the epoch) would be far outside key retention.
    let now = chrono::Utc::now().timestamp_millis();
    exec(
        db,
        &format!("UPDATE outbox_intents SET first_sent_at = {now} WHERE first_sent_at = 1"),
        "SELECT 1",
    )
    .await;
    exec(
        db,
        &format!(
            "UPDATE outbox_intents SET attempt_started_at = {now} WHERE attempt_started_at = 1"
        ),
        "SELECT 1",
    )
    .await;
}

async fn upgrade_keeps_sent_keys_and_namespaces_unsent_ones(t: TestDb) {
    record_at_schema_2(&t.db).await;
    let report = t.db.migrate().await.expect("upgrade to the current schema");
    assert!(report.applied.iter().any(|(v, _)| *v == 3), "{report:?}");
    let h = Harness::new(&t).await;
    let row = |op: &'static str| {
        let store = h.store.clone();
        async move {
            store
                .find_intent(&tenant("acme"), &operation(op))
                .await
                .unwrap()
                .unwrap()
        }
    };
    let fresh = row("op-fresh").await;
    assert!(
        fresh.idempotency_key.as_str().starts_with("obx2_"),
        "{fresh:?}"
    );
    assert_ne!(fresh.idempotency_key, old_key("op-fresh"));
    for op in ["op-retry", "op-inflight", "op-unknown"] {
        assert_eq!(
            row(op).await.idempotency_key,
            old_key(op),
            "{op} keeps its sent key"
        );
    }
    // A replay after the upgrade is still a replay, and returns the stored key.
    let replay = h
        .enqueue(NewIntent::new(
            "acme",
            "op-retry",
            REFUND,
            payload("op-retry"),
        ))
        .await;
    assert!(replay.replayed);
    assert_eq!(replay.idempotency_key, old_key("op-retry"));

    h.make_due().await;
    h.dispatcher.drain().await.unwrap();
    assert_eq!(row("op-fresh").await.state, IntentState::Delivered);
    assert_eq!(
        h.provider
            .effects_for_key(fresh.idempotency_key.as_str())
            .len(),
        1
    );
    for op in ["op-retry", "op-inflight"] {
        let r = row(op).await;
        assert_eq!(r.state, IntentState::Delivered, "{op}: {r:?}");
        assert_eq!(
            h.provider.effects_for_key(&old_key(op)).len(),
            1,
            "{op} resent with the key the provider may already know"
        );
    }
    assert_eq!(row("op-unknown").await.state, IntentState::Unknown);
    assert_eq!(h.provider.request_count_for_key(&old_key("op-unknown")), 0);
    assert_eq!(h.provider.effect_count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_from_schema_2_on_sqlite() {
    upgrade_keeps_sent_keys_and_namespaces_unsent_ones(TestDb::sqlite_at(2).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_from_schema_2_on_postgres() {
    let Some(t) = TestDb::postgres_at(2).await else {
        return;
    };
    upgrade_keeps_sent_keys_and_namespaces_unsent_ones(t).await;
}

/// Records, at schema 3 or later, a pending intent of two tenants, one in flight under a lease that
/// expired (its dispatcher died) and one unknown.
pub(crate) async fn record_at_schema_3(h: &Harness) -> [IntentId; 4] {
    let intent = |tenant: &str, op: &str| {
        NewIntent::new(tenant, op, REFUND, json!({"op": op, "amount": 100}))
    };
    let fresh = h.enqueue(intent("acme", "s3-fresh")).await.intent_id;
    let other = h.enqueue(intent("globex", "s3-other")).await.intent_id;
    let inflight = h.enqueue(intent("acme", "s3-inflight")).await.intent_id;
    let unknown = h.enqueue(intent("acme", "s3-unknown")).await.intent_id;
    exec(
        &h.db,
        &format!(
            "UPDATE outbox_intents SET state = 'in_flight', lease_owner = 'old-binary', \
             lease_expires_at = 1, attempt_started_at = {now}, attempt_count = 1, \
             fencing_token = 1 WHERE id = {inflight}",
            now = chrono::Utc::now().timestamp_millis()
        ),
        &format!(
            "UPDATE outbox_intents SET state = 'in_flight', lease_owner = 'old-binary', \
             lease_expires_at = now() - interval '1 second', attempt_started_at = now(), \
             attempt_count = 1, fencing_token = 1 WHERE id = {inflight}"
        ),
    )
    .await;
    let sql = format!(
        "UPDATE outbox_intents SET state = 'unknown', attempt_count = 1, ambiguous_attempts = 1 \
         WHERE id = {unknown}"
    );
    exec(&h.db, &sql, &sql).await;
    [fresh, other, inflight, unknown]
}

/// After an upgrade, with the intents of [`record_at_schema_3`]: the dispatcher delivers
/// the two pending intents and the one whose lease expired (counted as one ambiguous
/// attempt), each once under its key, and sends nothing for the unknown one.
pub(crate) async fn dispatch_after_upgrade(
    h: &Harness,
    [fresh, other, inflight, unknown]: [IntentId; 4],
) {
    h.make_due().await;
    h.dispatcher.drain().await.unwrap();
    for id in [fresh, other, inflight] {
        let row = h.intent(id).await;
        assert_eq!(row.state, IntentState::Delivered, "{row:?}");
        assert_eq!(
            h.provider
                .effects_for_key(row.idempotency_key.as_str())
                .len(),
            1
        );
    }
    let in_flight_row = h.intent(inflight).await;
    assert_eq!(in_flight_row.ambiguous_attempts, 1, "{in_flight_row:?}");
    let unknown_row = h.intent(unknown).await;
    assert_eq!(unknown_row.state, IntentState::Unknown);
    assert_eq!(
        h.provider
            .request_count_for_key(unknown_row.idempotency_key.as_str()),
        0
    );
}

/// Schema 3 → 4 (the per-tenant due index, the provider state table) with pending, in-flight
/// and unknown intents: the rows carry over and the dispatcher then claims by tenant turns,
/// takes the expired lease over and leaves the unknown intent alone.
async fn upgrade_from_schema_3_then_dispatch(t: TestDb) {
    let h = Harness::new(&t).await;
    let [fresh, other, inflight, unknown] = record_at_schema_3(&h).await;
    let report = t.db.migrate().await.expect("upgrade to the current schema");
    assert_eq!(
        report.applied,
        vec![
            (4, "tenant_turns_provider_states"),
            (5, "bytewise_turns_resend_confirmations"),
            (6, "send_window_items_by_intent"),
            (7, "wakeups_name_their_schema"),
            (8, "drop_superseded_tenant_walk_index"),
            (9, "field_checks_when_written"),
            (10, "cheaper_producer_functions"),
            (11, "pinned_function_search_path"),
            (12, "functions_written_with_qualified_quoting"),
            (13, "wakeups_can_be_turned_off"),
        ],
        "{report:?}"
    );
    assert!(h.store.list_provider_states().await.unwrap().is_empty());
    dispatch_after_upgrade(&h, [fresh, other, inflight, unknown]).await;
    assert_eq!(h.provider.effect_count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_from_schema_3_on_sqlite() {
    upgrade_from_schema_3_then_dispatch(TestDb::sqlite_at(3).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_from_schema_3_on_postgres() {
    let Some(t) = TestDb::postgres_at(3).await else {
        return;
    };
    upgrade_from_schema_3_then_dispatch(t).await;
}

/// The tenant walk's index probe on PostgreSQL, as the claim writes it (bytewise).
const WALK_PROBE_SQL: &str = "EXPLAIN SELECT min(tenant COLLATE \"C\") FROM outbox_intents \
    WHERE state = 'pending' AND tenant COLLATE \"C\" > 'B'";

/// Schema 4 → 5 (the bytewise tenant walk) with pending intents of tenants whose bytewise
/// and linguistic orders differ: the rows carry over, PostgreSQL's walk probe is served by
/// the rebuilt index, and the dispatcher delivers every intent once.
async fn upgrade_from_schema_4_then_dispatch(t: TestDb) {
    let h = Harness::new(&t).await;
    let mut ids = Vec::new();
    for tenant in ["B", "a", "a-b", "ab", "Z"] {
        for i in 0..3 {
            let intent = NewIntent::new(tenant, format!("s4-{i}"), REFUND, json!({"i": i}));
            ids.push(h.enqueue(intent).await.intent_id);
        }
    }
    let report = t.db.migrate().await.expect("upgrade to the current schema");
    assert_eq!(
        report.applied,
        vec![
            (5, "bytewise_turns_resend_confirmations"),
            (6, "send_window_items_by_intent"),
            (7, "wakeups_name_their_schema"),
            (8, "drop_superseded_tenant_walk_index"),
            (9, "field_checks_when_written"),
            (10, "cheaper_producer_functions"),
            (11, "pinned_function_search_path"),
            (12, "functions_written_with_qualified_quoting"),
            (13, "wakeups_can_be_turned_off"),
        ],
        "{report:?}"
    );
    if let Database::Postgres(pool) = &t.db {
        let mut tx = pool.begin().await.unwrap();
        sqlx::query("SET LOCAL enable_seqscan = off")
            .execute(&mut *tx)
            .await
            .unwrap();
        let plan: Vec<String> = sqlx::query_scalar(WALK_PROBE_SQL)
            .fetch_all(&mut *tx)
            .await
            .unwrap();
        assert!(
            plan.iter()
                .any(|line| line.contains("outbox_intents_due_by_tenant_bytewise")),
            "the walk probe uses the bytewise index: {plan:#?}"
        );
    }
    h.dispatcher.drain().await.unwrap();
    for id in ids {
        let row = h.intent(id).await;
        assert_eq!(row.state, IntentState::Delivered, "{row:?}");
        assert_eq!(
            h.provider
                .effects_for_key(row.idempotency_key.as_str())
                .len(),
            1
        );
    }
    assert_eq!(h.provider.effect_count(), 15);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_from_schema_4_on_sqlite() {
    upgrade_from_schema_4_then_dispatch(TestDb::sqlite_at(4).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_from_schema_4_on_postgres() {
    let Some(t) = TestDb::postgres_at(4).await else {
        return;
    };
    upgrade_from_schema_4_then_dispatch(t).await;
}

/// Schema 4 → 5 (where a person's may-act-twice confirmation lives) with
/// pending, in-flight and unknown intents: every row carries over with no confirmation
/// recorded, the dispatcher delivers the pending and the taken-over ones and leaves the
/// unknown one alone; a confirmed redispatch of that one is recorded and sent once.
async fn upgrade_to_0005_then_dispatch_and_redispatch(t: TestDb) {
    let h = Harness::new(&t).await;
    let [fresh, other, inflight, unknown] = record_at_schema_3(&h).await;
    let report = t.db.migrate().await.expect("upgrade to the current schema");
    assert!(
        report
            .applied
            .contains(&(5, "bytewise_turns_resend_confirmations")),
        "{report:?}"
    );
    let confirmed = scalar(
        &h.db,
        "SELECT count(*) FROM outbox_intents WHERE resend_confirmed_attempt IS NOT NULL",
    )
    .await;
    assert_eq!(confirmed, 0, "no confirmation carried over");
    h.make_due().await;
    h.dispatcher.drain().await.unwrap();
    for id in [fresh, other, inflight] {
        let row = h.intent(id).await;
        assert_eq!(row.state, IntentState::Delivered, "{row:?}");
        assert_eq!(
            h.provider
                .effects_for_key(row.idempotency_key.as_str())
                .len(),
            1
        );
    }
    let unknown_row = h.intent(unknown).await;
    assert_eq!(unknown_row.state, IntentState::Unknown);
    let key = unknown_row.idempotency_key.clone();
    assert_eq!(h.provider.request_count_for_key(key.as_str()), 0);

    // `record_at_schema_3` set the state without opening the item the dispatcher would
    // have opened; open it, then resolve it as a confirmed redispatch.
    let open = format!(
        "INSERT INTO outbox_reconciliation_items (intent_id, tenant, reason, opened_at) \
         SELECT id, tenant, 'outcome unknown', {} FROM outbox_intents WHERE id = {unknown}",
        chrono::Utc::now().timestamp_millis()
    );
    let open_pg = format!(
        "INSERT INTO outbox_reconciliation_items (intent_id, tenant, reason, opened_at) \
         SELECT id, tenant, 'outcome unknown', now() FROM outbox_intents WHERE id = {unknown}"
    );
    exec(&h.db, &open, &open_pg).await;
    let item = h.store.reconciliation_for_intent(unknown).await.unwrap()[0].id;
    let resolution = Resolution {
        item_id: item,
        scope: TenantScope::All,
        kind: ResolutionKind::Redispatch,
        actor: "ops-alice".into(),
        note: "checked at the provider".into(),
        now: chrono::Utc::now(),
        resend: ResendApproval {
            policies: std::sync::Arc::new(h.actions.resend_policies()),
            confirmed_may_act_twice: true,
        },
        seen_attempt_count: None,
    };
    h.store.resolve_reconciliation(&resolution).await.unwrap();
    let sql = format!(
        "SELECT CAST(resend_confirmed_attempt AS BIGINT) FROM outbox_intents WHERE id = {unknown}"
    );
    assert_eq!(
        scalar(&h.db, &sql).await,
        2,
        "the attempt after the redispatch"
    );
    h.dispatcher.drain().await.unwrap();
    assert_eq!(h.intent(unknown).await.state, IntentState::Delivered);
    assert_eq!(h.provider.request_count_for_key(key.as_str()), 1);
    assert_eq!(h.provider.effect_count(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_to_0005_on_sqlite() {
    let t = TestDb::sqlite_at(4).await;
    upgrade_to_0005_then_dispatch_and_redispatch(t).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_to_0005_on_postgres() {
    let Some(t) = TestDb::postgres_at(4).await else {
        return;
    };
    upgrade_to_0005_then_dispatch_and_redispatch(t).await;
}

/// A provider state row as a daemon of schema 5 publishes it (no send window), by `owner`.
async fn publish_as_schema_5(db: &Database, owner: &str) {
    let now = chrono::Utc::now();
    exec(
        db,
        &format!(
            "INSERT INTO outbox_provider_states (owner, provider, in_flight, max_in_flight, \
             rate_limited_waits, breaker, breaker_open_until, paused_until, updated_at) \
             VALUES ('{owner}', 'payments', 2, 8, 1, 'closed', NULL, NULL, {})",
            now.timestamp_millis()
        ),
        &format!(
            "INSERT INTO outbox_provider_states (owner, provider, in_flight, max_in_flight, \
             rate_limited_waits, breaker, breaker_open_until, paused_until, updated_at) \
             VALUES ('{owner}', 'payments', 2, 8, 1, 'closed', NULL, NULL, now())"
        ),
    )
    .await;
}

/// Schema 5 → 6 (the published send window) with pending, in-flight and unknown intents and
/// a provider state row a schema 5 daemon published: the rows carry over, the old row reads
/// with no window, a schema 5 daemon can still publish, the column refuses a window that is
/// negative, above `max_in_flight` or not an integer, and reconciliation items are found by
/// intent through an index (what pruning's cascade needs); the dispatcher delivers the pending and the taken-over intents and leaves the
/// unknown one in reconciliation.
async fn upgrade_to_0006_then_dispatch(t: TestDb) {
    let h = Harness::new(&t).await;
    let [fresh, other, inflight, unknown] = record_at_schema_3(&h).await;
    // The reconciliation item the dispatcher opened when the outcome became unknown.
    exec(
        &h.db,
        &format!(
            "INSERT INTO outbox_reconciliation_items (intent_id, tenant, reason, opened_at) \
             SELECT id, tenant, 'outcome unknown', {} FROM outbox_intents WHERE id = {unknown}",
            chrono::Utc::now().timestamp_millis()
        ),
        &format!(
            "INSERT INTO outbox_reconciliation_items (intent_id, tenant, reason, opened_at) \
             SELECT id, tenant, 'outcome unknown', now() FROM outbox_intents WHERE id = {unknown}"
        ),
    )
    .await;
    publish_as_schema_5(&h.db, "old-replica").await;
    let report = t.db.migrate().await.expect("upgrade to the current schema");
    assert_eq!(
        report.applied,
        vec![
            (6, "send_window_items_by_intent"),
            (7, "wakeups_name_their_schema"),
            (8, "drop_superseded_tenant_walk_index"),
            (9, "field_checks_when_written"),
            (10, "cheaper_producer_functions"),
            (11, "pinned_function_search_path"),
            (12, "functions_written_with_qualified_quoting"),
            (13, "wakeups_can_be_turned_off"),
        ],
        "{report:?}"
    );
    let rows = h.store.list_provider_states().await.unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let old = &rows[0];
    assert_eq!(
        (
            old.owner.as_str(),
            old.provider.as_str(),
            old.in_flight,
            old.max_in_flight,
            old.rate_limited_waits,
            old.breaker.as_str()
        ),
        ("old-replica", "payments", 2, 8, 1, "closed")
    );
    assert_eq!(old.send_window, None, "an old row has no window");
    let json = outboxd::status::providers_json(&rows, chrono::Utc::now());
    assert!(json[0]["send_window"].is_null(), "{json}");

    // The previous release keeps publishing on the new schema (rolling upgrade, rollback).
    publish_as_schema_5(&h.db, "still-old").await;
    assert_eq!(h.store.list_provider_states().await.unwrap().len(), 2);
    // max_in_flight is 8: a window is 0..=8 and, on SQLite too, an integer (PostgreSQL
    // refuses the text itself).
    for (value, why) in [
        ("-1", "a negative window"),
        ("9", "a window above max_in_flight"),
        ("'abc'", "a text window"),
    ] {
        let sql = format!(
            "UPDATE outbox_provider_states SET send_window = {value} WHERE owner = 'still-old'"
        );
        let refused = match &h.db {
            Database::Sqlite(pool) => sqlx::query(sqlx::AssertSqlSafe(sql.as_str()))
                .execute(pool)
                .await
                .is_err(),
            Database::Postgres(pool) => sqlx::query(sqlx::AssertSqlSafe(sql.as_str()))
                .execute(pool)
                .await
                .is_err(),
        };
        assert!(refused, "{why} ({value}) was stored");
    }
    // Pruning an intent deletes its items by intent_id, resolved ones included: the lookup
    // has an index now (the only one before covered open items).
    let plan = match &h.db {
        Database::Sqlite(pool) => {
            use sqlx::Row as _;
            let rows = sqlx::query(
                "EXPLAIN QUERY PLAN SELECT id FROM outbox_reconciliation_items WHERE intent_id = 1",
            )
            .fetch_all(pool)
            .await
            .unwrap();
            let details: Vec<String> = rows.iter().map(|r| r.get("detail")).collect();
            details.join("; ")
        }
        Database::Postgres(pool) => {
            let mut tx = pool.begin().await.unwrap();
            sqlx::query("SET LOCAL enable_seqscan = off")
                .execute(&mut *tx)
                .await
                .unwrap();
            let lines: Vec<String> = sqlx::query_scalar(
                "EXPLAIN SELECT id FROM outbox_reconciliation_items WHERE intent_id = 1",
            )
            .fetch_all(&mut *tx)
            .await
            .unwrap();
            lines.join("; ")
        }
    };
    assert!(
        plan.contains("outbox_reconciliation_by_intent"),
        "items are not found by intent through the new index: {plan}"
    );

    dispatch_after_upgrade(&h, [fresh, other, inflight, unknown]).await;
    assert_eq!(h.open_items(unknown).await, 1, "still in reconciliation");
    assert_eq!(h.provider.effect_count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_to_0006_on_sqlite() {
    upgrade_to_0006_then_dispatch(TestDb::sqlite_at(5).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_to_0006_on_postgres() {
    let Some(t) = TestDb::postgres_at(5).await else {
        return;
    };
    upgrade_to_0006_then_dispatch(t).await;
}

/// Schema 6 → 7 (the wake-up notification names its schema) with pending, in-flight and
/// unknown intents: the rows carry over; on PostgreSQL an insert now notifies with the
/// outbox's schema as the payload; the dispatcher delivers the pending and the taken-over
/// intents and leaves the unknown one alone.
async fn upgrade_to_0007_then_dispatch(t: TestDb) {
    let h = Harness::new(&t).await;
    let [fresh, other, inflight, unknown] = record_at_schema_3(&h).await;
    let report = t.db.migrate().await.expect("upgrade to the current schema");
    assert_eq!(
        report.applied,
        vec![
            (7, "wakeups_name_their_schema"),
            (8, "drop_superseded_tenant_walk_index"),
            (9, "field_checks_when_written"),
            (10, "cheaper_producer_functions"),
            (11, "pinned_function_search_path"),
            (12, "functions_written_with_qualified_quoting"),
            (13, "wakeups_can_be_turned_off"),
        ],
        "{report:?}"
    );
    assert_eq!(
        scalar(&h.db, "SELECT count(*) FROM outbox_intents").await,
        4,
        "every row carried over"
    );
    if let Database::Postgres(pool) = &h.db {
        let own =
            h.db.outbox_schema()
                .await
                .unwrap()
                .expect("the outbox's schema");
        let mut listener = sqlx::postgres::PgListener::connect_with(pool)
            .await
            .unwrap();
        listener
            .listen(outboxd::dispatch::wakeup::CHANNEL)
            .await
            .unwrap();
        h.enqueue(NewIntent::new(
            "acme",
            "s7-new",
            REFUND,
            json!({"amount": 1}),
        ))
        .await;
        // The channel is shared by every schema of the test database (other tests insert
        // at the same time): wait for one that names this outbox. Before 0007 none does.
        let named = tokio::time::timeout(std::time::Duration::from_secs(10), async {
            loop {
                let note = listener.recv().await.unwrap();
                if note.payload() == own {
                    return;
                }
            }
        })
        .await;
        assert!(
            named.is_ok(),
            "no notification named the outbox's schema {own}"
        );
    }
    dispatch_after_upgrade(&h, [fresh, other, inflight, unknown]).await;
    // The three carried over, and on PostgreSQL the one inserted to read the notification.
    let inserted_after = usize::from(matches!(h.db, Database::Postgres(_)));
    assert_eq!(h.provider.effect_count(), 3 + inserted_after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_to_0007_on_sqlite() {
    upgrade_to_0007_then_dispatch(TestDb::sqlite_at(6).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_to_0007_on_postgres() {
    let Some(t) = TestDb::postgres_at(6).await else {
        return;
    };
    upgrade_to_0007_then_dispatch(t).await;
}

/// How many indexes of the outbox's own schema have this name.
async fn index_count(db: &Database, name: &str) -> i64 {
    let sqlite =
        format!("SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = '{name}'");
    let postgres = format!(
        "SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema() AND indexname = '{name}'"
    );
    match db {
        Database::Sqlite(_) => scalar(db, &sqlite).await,
        Database::Postgres(_) => scalar(db, &postgres).await,
    }
}

/// Schema 7 → 8 with pending, in-flight and unknown intents: on PostgreSQL the index of
/// the schema-4 tenant walk is gone and the bytewise one stays; on SQLite, whose claim
/// walks tenants through that index, nothing changes. The rows carry over and the
/// dispatcher delivers the pending and taken-over intents and leaves the unknown one alone.
async fn upgrade_to_0008_then_dispatch(t: TestDb) {
    let h = Harness::new(&t).await;
    let [fresh, other, inflight, unknown] = record_at_schema_3(&h).await;
    let old = "outbox_intents_due_by_tenant";
    assert_eq!(index_count(&h.db, old).await, 1, "schema 7 has {old}");
    let report = t.db.migrate().await.expect("upgrade to the current schema");
    assert_eq!(
        report.applied,
        vec![
            (8, "drop_superseded_tenant_walk_index"),
            (9, "field_checks_when_written"),
            (10, "cheaper_producer_functions"),
            (11, "pinned_function_search_path"),
            (12, "functions_written_with_qualified_quoting"),
            (13, "wakeups_can_be_turned_off"),
        ],
        "{report:?}"
    );
    assert_eq!(
        scalar(&h.db, "SELECT count(*) FROM outbox_intents").await,
        4,
        "every row carried over"
    );
    match h.db {
        Database::Postgres(_) => {
            assert_eq!(index_count(&h.db, old).await, 0, "{old} dropped");
            let bytewise = "outbox_intents_due_by_tenant_bytewise";
            assert_eq!(index_count(&h.db, bytewise).await, 1, "{bytewise} stays");
        }
        Database::Sqlite(_) => {
            assert_eq!(index_count(&h.db, old).await, 1, "SQLite keeps {old}");
        }
    }
    dispatch_after_upgrade(&h, [fresh, other, inflight, unknown]).await;
    assert_eq!(h.provider.effect_count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_to_0008_on_sqlite() {
    upgrade_to_0008_then_dispatch(TestDb::sqlite_at(7).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_to_0008_on_postgres() {
    let Some(t) = TestDb::postgres_at(7).await else {
        return;
    };
    upgrade_to_0008_then_dispatch(t).await;
}

/// Migration 0008 waits at most its `lock_timeout` for a transaction that has read the
/// outbox, then fails changing nothing (producers' inserts would queue behind a waiting
/// `DROP INDEX`); once that transaction ends it applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_to_0008_gives_up_behind_a_long_transaction_on_postgres() {
    let Some(t) = TestDb::postgres_at(7).await else {
        return;
    };
    let Database::Postgres(pool) = &t.db else {
        unreachable!("a PostgreSQL test database")
    };
    let mut reader = pool.begin().await.unwrap();
    sqlx::query("SELECT count(*) FROM outbox_intents")
        .execute(&mut *reader)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let refused = t.db.migrate().await;
    let err = refused.expect_err("the drop cannot take its lock while the reader is open");
    assert!(
        format!("{err}").contains("lock timeout"),
        "the error names the lock timeout: {err}"
    );
    assert!(
        started.elapsed() >= std::time::Duration::from_secs(9),
        "waited its timeout"
    );
    assert_eq!(
        index_count(&t.db, "outbox_intents_due_by_tenant").await,
        1,
        "nothing changed"
    );
    reader.rollback().await.unwrap();
    let report =
        t.db.migrate()
            .await
            .expect("applies once the reader is gone");
    assert_eq!(
        report.applied,
        vec![
            (8, "drop_superseded_tenant_walk_index"),
            (9, "field_checks_when_written"),
            (10, "cheaper_producer_functions"),
            (11, "pinned_function_search_path"),
            (12, "functions_written_with_qualified_quoting"),
            (13, "wakeups_can_be_turned_off"),
        ]
    );
    assert_eq!(index_count(&t.db, "outbox_intents_due_by_tenant").await, 0);
}

/// How many CHECK constraints `outbox_intents` has on PostgreSQL.
async fn intent_check_count(db: &Database) -> i64 {
    scalar(
        db,
        "SELECT count(*) FROM pg_constraint c JOIN pg_class r ON r.oid = c.conrelid \
         WHERE r.relname = 'outbox_intents' AND r.relnamespace = current_schema()::regnamespace \
           AND c.contype = 'c'",
    )
    .await
}

/// Schema 8 → 9 with pending, in-flight and unknown intents: on PostgreSQL the eight field
/// CHECKs become the `UPDATE OF` trigger (the state, lease and open-attempt checks stay);
/// a hand-written UPDATE that breaks a field rule is still refused by name; on SQLite
/// nothing changes. The rows carry over and the dispatcher delivers the pending and
/// taken-over intents and leaves the unknown one alone.
async fn upgrade_to_0009_then_dispatch(t: TestDb) {
    let h = Harness::new(&t).await;
    let [fresh, other, inflight, unknown] = record_at_schema_3(&h).await;
    if let Database::Postgres(_) = h.db {
        assert_eq!(intent_check_count(&h.db).await, 11, "schema 8's CHECKs");
    }
    let report = t.db.migrate().await.expect("upgrade to the current schema");
    assert_eq!(
        report.applied,
        vec![
            (9, "field_checks_when_written"),
            (10, "cheaper_producer_functions"),
            (11, "pinned_function_search_path"),
            (12, "functions_written_with_qualified_quoting"),
            (13, "wakeups_can_be_turned_off"),
        ],
        "{report:?}"
    );
    assert_eq!(
        scalar(&h.db, "SELECT count(*) FROM outbox_intents").await,
        4,
        "every row carried over"
    );
    if let Database::Postgres(_) = h.db {
        assert_eq!(
            intent_check_count(&h.db).await,
            3,
            "state, lease and open attempt"
        );
    }
    let bad = format!("UPDATE outbox_intents SET action = '' WHERE id = {fresh}");
    let err = try_exec(&h.db, &bad)
        .await
        .expect_err("an empty action is refused after the upgrade");
    let named = match h.db {
        Database::Postgres(_) => "outbox_intents_action_check",
        Database::Sqlite(_) => "CHECK constraint failed",
    };
    assert!(err.to_string().contains(named), "{err}");
    dispatch_after_upgrade(&h, [fresh, other, inflight, unknown]).await;
    assert_eq!(h.provider.effect_count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_to_0009_on_sqlite() {
    upgrade_to_0009_then_dispatch(TestDb::sqlite_at(8).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_to_0009_on_postgres() {
    let Some(t) = TestDb::postgres_at(8).await else {
        return;
    };
    upgrade_to_0009_then_dispatch(t).await;
}

/// Migration 0009 takes the table's strongest lock before anything else: a producer's
/// transaction that read the outbox before the migration started and enqueues while the
/// migration waits for it commits, and the migration applies once it has. (Taking a
/// weaker lock first, for its `CREATE TRIGGER`, then the strongest for its `DROP
/// CONSTRAINT`, deadlocked with such a transaction and rolled it back.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_to_0009_lets_a_waiting_producer_commit_on_postgres() {
    let Some(t) = TestDb::postgres_at(8).await else {
        return;
    };
    let Database::Postgres(pool) = &t.db else {
        unreachable!("a PostgreSQL test database")
    };
    let mut producer = pool.begin().await.unwrap();
    sqlx::query("SELECT count(*) FROM outbox_intents")
        .execute(&mut *producer)
        .await
        .unwrap();
    let db = t.db.clone();
    let migration = tokio::spawn(async move { db.migrate().await });
    let waiting = "SELECT count(*) FROM pg_locks \
                   WHERE relation = 'outbox_intents'::regclass AND NOT granted";
    // Other tests' migrations in this database go first (one advisory lock serialises
    // them all), and one of them waits out a 10 s lock timeout.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    while scalar(&t.db, waiting).await == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the migration waits for the producer's lock"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    sqlx::query("SELECT * FROM outbox_enqueue('acme', 'op-during', 'issue_refund', '{}')")
        .execute(&mut *producer)
        .await
        .expect("the producer's enqueue goes ahead of the waiting migration");
    producer.commit().await.expect("the producer commits");
    let report = migration
        .await
        .unwrap()
        .expect("the migration applies after the producer");
    assert_eq!(
        report.applied,
        vec![
            (9, "field_checks_when_written"),
            (10, "cheaper_producer_functions"),
            (11, "pinned_function_search_path"),
            (12, "functions_written_with_qualified_quoting"),
            (13, "wakeups_can_be_turned_off"),
        ]
    );
    assert_eq!(
        scalar(
            &t.db,
            "SELECT count(*) FROM outbox_intents WHERE operation_id = 'op-during'"
        )
        .await,
        1
    );
    assert_eq!(intent_check_count(&t.db).await, 3);
}

/// The four functions 0010 replaces, with their privileges and settings, as
/// `proname|language|security definer|search_path setting|ACL` (PostgreSQL).
async fn producer_functions(db: &Database) -> Vec<String> {
    let Database::Postgres(pool) = db else {
        unreachable!("a PostgreSQL test database")
    };
    sqlx::query_scalar(
        "SELECT p.proname || '|' || l.lanname || '|' || p.prosecdef || '|' \
                || coalesce(array_to_string(p.proconfig, ';'), '') || '|' \
                || coalesce(p.proacl::text, 'default') \
           FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang \
          WHERE p.pronamespace = current_schema()::regnamespace \
            AND p.proname IN ('outbox_default_idempotency_key', 'outbox_wire_idempotency_key', \
                              'outbox_canonical_json', 'outbox_payload_sha256') \
          ORDER BY p.proname",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Keys the two key functions derive, for a few inputs (PostgreSQL).
pub(crate) async fn derived_keys(db: &Database) -> Vec<String> {
    let Database::Postgres(pool) = db else {
        unreachable!("a PostgreSQL test database")
    };
    sqlx::query_scalar(
        "SELECT outbox_default_idempotency_key(t, 'op-' || i, 'issue_refund') || ' ' \
                || outbox_wire_idempotency_key(t, 'key ' || i) \
           FROM generate_series(1, 20) AS i, unnest(ARRAY['acme', 'tenant é']) AS t \
          ORDER BY t, i",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Enqueues `intent` in its own transaction, committed when it succeeds.
async fn try_enqueue(
    db: &Database,
    intent: NewIntent,
) -> Result<outboxd::Enqueued, outboxd::EnqueueError> {
    match db {
        Database::Postgres(pool) => {
            let mut tx = pool.begin().await.unwrap();
            let r = outboxd::enqueue(&mut tx, intent).await?;
            tx.commit().await.unwrap();
            Ok(r)
        }
        Database::Sqlite(pool) => {
            let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.unwrap();
            let r = outboxd::enqueue(&mut tx, intent).await?;
            tx.commit().await.unwrap();
            Ok(r)
        }
    }
}

/// Schema 9 → 10 with pending, in-flight and unknown intents and two receipts issued by
/// the old functions (one with the derived key, one with the producer's own): on
/// PostgreSQL the four rewritten functions keep their privileges (revoked from PUBLIC
/// here, as a locked-down install has them), the wire key function stays SECURITY DEFINER
/// with its search_path pinned, and both key functions derive the keys they derived
/// before; replaying an old receipt answers it unchanged, a different payload for it is a
/// conflict, and invalid calls of `outbox_enqueue` are refused with the messages they got
/// before. On SQLite nothing changes. The dispatcher then delivers each pending intent
/// once under its key and leaves the unknown one alone.
async fn upgrade_to_0010_then_dispatch(t: TestDb) {
    let h = Harness::new(&t).await;
    let ids = record_at_schema_3(&h).await;
    let derived = NewIntent::new(
        "acme",
        "s9-derived",
        REFUND,
        json!({"a": [1, 2.50, {"b": null}]}),
    );
    let own = NewIntent::new("globex", "s9-own", REFUND, json!({"amount": 7}))
        .with_idempotency_key("producer key 1");
    let derived_before = h.enqueue(derived.clone()).await;
    let own_before = h.enqueue(own.clone()).await;
    let postgres = matches!(h.db, Database::Postgres(_));
    let (functions_before, keys_before) = if postgres {
        for f in [
            "outbox_default_idempotency_key(text, text, text)",
            "outbox_wire_idempotency_key(text, text)",
            "outbox_canonical_json(jsonb, integer)",
            "outbox_payload_sha256(text, integer, jsonb)",
        ] {
            try_exec(&h.db, &format!("REVOKE ALL ON FUNCTION {f} FROM PUBLIC"))
                .await
                .unwrap();
        }
        (producer_functions(&h.db).await, derived_keys(&h.db).await)
    } else {
        (Vec::new(), Vec::new())
    };

    let report = t.db.migrate().await.expect("upgrade to the current schema");
    assert_eq!(
        report.applied,
        vec![
            (10, "cheaper_producer_functions"),
            (11, "pinned_function_search_path"),
            (12, "functions_written_with_qualified_quoting"),
            (13, "wakeups_can_be_turned_off"),
        ],
        "{report:?}"
    );
    assert_eq!(
        scalar(&h.db, "SELECT count(*) FROM outbox_intents").await,
        6
    );
    if postgres {
        let after = producer_functions(&h.db).await;
        assert_eq!(after.len(), 4, "{after:?}");
        for (before, after) in functions_before.iter().zip(&after) {
            let acl = |row: &str| row.rsplit('|').next().unwrap().to_string();
            assert_eq!(
                acl(before),
                acl(after),
                "privileges kept: {before} → {after}"
            );
            let public = acl(after)
                .trim_matches(['{', '}'])
                .split(',')
                .any(|entry| entry.starts_with('='));
            assert!(
                acl(after) != "default" && !public,
                "still revoked from PUBLIC: {after}"
            );
        }
        assert!(
            after[1].starts_with("outbox_default_idempotency_key|plpgsql|false|"),
            "{after:?}"
        );
        assert!(
            after[3].starts_with("outbox_wire_idempotency_key|plpgsql|true|search_path="),
            "{after:?}"
        );
        assert!(after[3].contains(", pg_temp|"), "{after:?}");
        assert_eq!(
            derived_keys(&h.db).await,
            keys_before,
            "the same keys after 0010"
        );
    }

    for (intent, before) in [(derived, &derived_before), (own, &own_before)] {
        let again = h.enqueue(intent.clone()).await;
        assert!(again.replayed, "{again:?}");
        assert_eq!(
            (again.intent_id, &again.idempotency_key),
            (before.intent_id, &before.idempotency_key)
        );
        let changed = NewIntent::new(
            intent.tenant.as_str(),
            intent.operation_id.as_str(),
            REFUND,
            json!({"changed": true}),
        );
        let err = try_enqueue(&h.db, changed)
            .await
            .expect_err("a different payload");
        assert!(
            matches!(err, outboxd::EnqueueError::Conflict { .. }),
            "{err}"
        );
    }
    let fresh_after = h
        .enqueue(NewIntent::new("acme", "s10-new", REFUND, json!({"n": 1})))
        .await;
    assert!(!fresh_after.replayed);
    assert_eq!(
        fresh_after.idempotency_key,
        outboxd::wire_key::wire_idempotency_key(
            &key_secret(&h.db).await,
            &tenant("acme"),
            &default_idempotency_key(
                &tenant("acme"),
                &operation("s10-new"),
                &outboxd::intent::ActionName::parse(REFUND).unwrap()
            ),
        )
        .as_str()
    );
    if postgres {
        for (sql, expected) in [
            (
                "SELECT * FROM outbox_enqueue('acme', 'op-x', 'bad action', '{}')",
                "invalid action",
            ),
            (
                "SELECT * FROM outbox_enqueue('', 'op-x', 'a', NULL)",
                "invalid tenant",
            ),
            (
                "SELECT * FROM outbox_enqueue('acme', 'op-x', 'a', NULL)",
                "invalid payload: must be a JSON object, got null",
            ),
            (
                "SELECT * FROM outbox_enqueue('acme', 'op-x', 'a', '[1]')",
                "invalid payload",
            ),
            (
                "SELECT * FROM outbox_enqueue('acme', 'op-x', 'a', '{}', 0)",
                "invalid payload_version",
            ),
            (
                "SELECT * FROM outbox_enqueue('acme', 's9-derived', 'a b', '{}')",
                "invalid action",
            ),
        ] {
            let err = try_exec(&h.db, sql).await.expect_err(sql);
            assert!(err.to_string().contains(expected), "{sql}: {err}");
            let code = err
                .as_database_error()
                .and_then(|e| e.code())
                .map(|c| c.to_string());
            assert_eq!(code.as_deref(), Some("22023"), "{sql}: {err}");
        }
        assert_eq!(
            scalar(&h.db, "SELECT count(*) FROM outbox_intents").await,
            7
        );
    }

    dispatch_after_upgrade(&h, ids).await;
    assert_eq!(
        h.provider.effect_count(),
        6,
        "three old pending, two receipts, one new"
    );
}

/// The installation's key secret.
async fn key_secret(db: &Database) -> outboxd::wire_key::KeySecret {
    let hex: String = match db {
        Database::Postgres(pool) => {
            sqlx::query_scalar("SELECT key_secret FROM outboxd_installation")
                .fetch_one(pool)
                .await
                .unwrap()
        }
        Database::Sqlite(pool) => sqlx::query_scalar("SELECT key_secret FROM outboxd_installation")
            .fetch_one(pool)
            .await
            .unwrap(),
    };
    outboxd::wire_key::KeySecret::from_hex(&hex).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_to_0010_on_sqlite() {
    upgrade_to_0010_then_dispatch(TestDb::sqlite_at(9).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_to_0010_on_postgres() {
    let Some(t) = TestDb::postgres_at(9).await else {
        return;
    };
    upgrade_to_0010_then_dispatch(t).await;
}

/// Every function of outboxd's schema, with its privileges and settings, as
/// `proname|language|security definer|settings|owner|ACL` (PostgreSQL).
pub(crate) async fn all_outboxd_functions(db: &Database) -> Vec<String> {
    let Database::Postgres(pool) = db else {
        unreachable!("a PostgreSQL test database")
    };
    sqlx::query_scalar(
        "SELECT p.proname || '|' || l.lanname || '|' || p.prosecdef || '|' \
                || coalesce(array_to_string(p.proconfig, ';'), '') || '|' \
                || p.proowner::regrole::text || '|' || coalesce(p.proacl::text, 'default') \
           FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang \
          WHERE p.pronamespace = current_schema()::regnamespace AND p.proname LIKE 'outbox%' \
          ORDER BY p.proname",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Digests the payload digest function computes for a few payloads (PostgreSQL).
pub(crate) async fn derived_digests(db: &Database) -> Vec<String> {
    let Database::Postgres(pool) = db else {
        unreachable!("a PostgreSQL test database")
    };
    sqlx::query_scalar(
        "SELECT outbox_payload_sha256('issue_refund', v, p) \
           FROM unnest(ARRAY['{\"a\": 1}', '{\"b\": [1, 2.50, {\"c\": null, \"a\": \"é\"}], \"a\": 1e3}', \
                             '{\"deep\": {\"x\": [[], {}], \"n\": -0.000}}']::jsonb[]) AS p, \
                generate_series(1, 2) AS v \
          ORDER BY p::text, v",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Schema 10 → 11 with pending, in-flight and unknown intents and two receipts issued by
/// the 0010 functions (one with the derived key, one with the producer's own): on
/// PostgreSQL every producer function and trigger function keeps its owner, privileges
/// (revoked from PUBLIC here, as a locked-down install has them) and SECURITY DEFINER
/// flag; all but the two recursive helpers pin `search_path = pg_catalog, pg_temp`; the
/// digests and both keys are the ones they were; and an aggregate planted in the schema
/// that ran for every INSERT before the upgrade (asserted, so this test can fail) runs
/// no more. Replaying an old receipt answers it unchanged, a different payload for it is
/// a conflict. On SQLite nothing changes. The dispatcher then delivers each pending
/// intent once under its key and leaves the unknown one alone.
async fn upgrade_to_0011_then_dispatch(t: TestDb) {
    let h = Harness::new(&t).await;
    let ids = record_at_schema_3(&h).await;
    let derived = NewIntent::new(
        "acme",
        "s10-derived",
        REFUND,
        json!({"a": [1, 2.50, {"b": null}]}),
    );
    let own = NewIntent::new("globex", "s10-own", REFUND, json!({"amount": 7}))
        .with_idempotency_key("producer key 10");
    let derived_before = h.enqueue(derived.clone()).await;
    let own_before = h.enqueue(own.clone()).await;
    let postgres = matches!(h.db, Database::Postgres(_));
    let (functions_before, keys_before, digests_before) = if postgres {
        for f in [
            "outbox_enqueue(text, text, text, jsonb, integer, text, text, timestamptz, timestamptz)",
            "outbox_default_idempotency_key(text, text, text)",
            "outbox_payload_sha256(text, integer, jsonb)",
        ] {
            try_exec(&h.db, &format!("REVOKE ALL ON FUNCTION {f} FROM PUBLIC"))
                .await
                .unwrap();
        }
        for sql in crate::producer_holes::PLANT_CURRENT_SETTING {
            try_exec(&h.db, sql).await.unwrap();
        }
        // A session keeps the plans its functions made (with the functions they resolved
        // then): a new one resolves the calls with the plant in place.
        enqueue_committed(
            &t.reopen(1).await,
            NewIntent::new("acme", "s10-planted", REFUND, json!({"n": 0})),
        )
        .await;
        assert!(
            scalar(&h.db, "SELECT count(*) FROM planted_calls").await > 0,
            "the plant runs for an INSERT at schema 10"
        );
        try_exec(&h.db, "DELETE FROM planted_calls").await.unwrap();
        (
            all_outboxd_functions(&h.db).await,
            derived_keys(&h.db).await,
            derived_digests(&h.db).await,
        )
    } else {
        h.enqueue(NewIntent::new(
            "acme",
            "s10-planted",
            REFUND,
            json!({"n": 0}),
        ))
        .await;
        (Vec::new(), Vec::new(), Vec::new())
    };

    // `outboxd migrate` now refuses a schema holding the plant (it would outbid the
    // migrations' own calls too): it is moved aside for the upgrade and back after it.
    let side = support::db::unique_name("obxt_aside");
    if postgres {
        let refused = t.db.migrate().await.expect_err("the plant is refused");
        assert!(
            refused.to_string().contains("current_setting(unknown)"),
            "{refused}"
        );
        try_exec(&h.db, &format!("CREATE SCHEMA {side}"))
            .await
            .unwrap();
        try_exec(
            &h.db,
            &format!("ALTER AGGREGATE current_setting(unknown) SET SCHEMA {side}"),
        )
        .await
        .unwrap();
    }
    let report = t.db.migrate().await.expect("upgrade to the current schema");
    assert_eq!(
        report.applied,
        vec![
            (11, "pinned_function_search_path"),
            (12, "functions_written_with_qualified_quoting"),
            (13, "wakeups_can_be_turned_off"),
        ],
        "{report:?}"
    );
    if postgres {
        try_exec(
            &h.db,
            &format!(
                "DO $$ BEGIN EXECUTE pg_catalog.format('ALTER AGGREGATE {side}.current_setting(unknown) \
                 SET SCHEMA %I', pg_catalog.current_schema()); END $$"
            ),
        )
        .await
        .unwrap();
        try_exec(&h.db, &format!("DROP SCHEMA {side}"))
            .await
            .unwrap();
    }
    assert_eq!(
        scalar(&h.db, "SELECT count(*) FROM outbox_intents").await,
        7
    );
    if postgres {
        let after = all_outboxd_functions(&h.db).await;
        assert_eq!(after.len(), functions_before.len(), "{after:?}");
        assert_eq!(after.len(), 12, "{after:?}");
        let field = |row: &str, i: usize| row.split('|').nth(i).unwrap().to_string();
        for (before, after) in functions_before.iter().zip(&after) {
            // PUBLIC may no longer attach the two SECURITY DEFINER trigger functions to a
            // table; every other privilege stays as it was.
            let trigger = [
                "outbox_intents_fill_defaults",
                "outbox_intents_refuse_pruned",
            ]
            .contains(&field(after, 0).as_str());
            for (i, what) in [
                (0, "name"),
                (1, "language"),
                (2, "security definer"),
                (4, "owner"),
                (5, "privileges"),
            ] {
                if trigger && i == 5 {
                    let acl = field(after, 5);
                    assert!(
                        acl != "default" && !acl.contains("{=") && !acl.contains(",="),
                        "PUBLIC may still execute: {after}"
                    );
                    continue;
                }
                assert_eq!(
                    field(before, i),
                    field(after, i),
                    "{what} kept: {before} → {after}"
                );
            }
            let helper =
                ["outbox_canonical_json", "outbox_check_text"].contains(&field(after, 0).as_str());
            let pinned = field(after, 3) == "search_path=pg_catalog, pg_temp";
            assert_eq!(
                pinned, !helper,
                "search_path pinned unless a helper: {after}"
            );
        }
        assert_eq!(
            derived_keys(&h.db).await,
            keys_before,
            "the same keys after 0011"
        );
        assert_eq!(
            derived_digests(&h.db).await,
            digests_before,
            "the same digests after 0011"
        );
    }

    for (intent, before) in [(derived, &derived_before), (own, &own_before)] {
        let again = h.enqueue(intent.clone()).await;
        assert!(again.replayed, "{again:?}");
        assert_eq!(
            (again.intent_id, &again.idempotency_key),
            (before.intent_id, &before.idempotency_key)
        );
        let changed = NewIntent::new(
            intent.tenant.as_str(),
            intent.operation_id.as_str(),
            REFUND,
            json!({"changed": true}),
        );
        let err = try_enqueue(&h.db, changed)
            .await
            .expect_err("a different payload");
        assert!(
            matches!(err, outboxd::EnqueueError::Conflict { .. }),
            "{err}"
        );
    }
    let fresh_after = h
        .enqueue(NewIntent::new("acme", "s11-new", REFUND, json!({"n": 1})))
        .await;
    assert!(!fresh_after.replayed);
    assert_eq!(
        fresh_after.idempotency_key,
        outboxd::wire_key::wire_idempotency_key(
            &key_secret(&h.db).await,
            &tenant("acme"),
            &default_idempotency_key(
                &tenant("acme"),
                &operation("s11-new"),
                &outboxd::intent::ActionName::parse(REFUND).unwrap()
            ),
        )
        .as_str()
    );
    if postgres {
        let fresh = t.reopen(1).await;
        enqueue_committed(
            &fresh,
            NewIntent::new("acme", "s11-planted", REFUND, json!({"n": 3})),
        )
        .await;
        try_exec(
            &fresh,
            &format!(
                "INSERT INTO outbox_intents (tenant, operation_id, action, payload) \
                 VALUES ('acme', 's11-plain', '{REFUND}', '{{\"n\": 2}}')"
            ),
        )
        .await
        .unwrap();
        assert_eq!(
            scalar(&h.db, "SELECT count(*) FROM planted_calls").await,
            0,
            "the planted aggregate ran for an INSERT after 0011"
        );
    }

    dispatch_after_upgrade(&h, ids).await;
    if postgres {
        assert_eq!(
            scalar(&h.db, "SELECT count(*) FROM planted_calls").await,
            0,
            "the planted aggregate ran for the dispatcher's statements"
        );
    }
    let expected = if postgres { 9 } else { 7 };
    assert_eq!(
        h.provider.effect_count(),
        expected,
        "three old pending, two receipts, the planted-era one, the new ones"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_to_0011_on_sqlite() {
    upgrade_to_0011_then_dispatch(TestDb::sqlite_at(10).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_to_0011_on_postgres() {
    let Some(t) = TestDb::postgres_at(10).await else {
        return;
    };
    upgrade_to_0011_then_dispatch(t).await;
}
