//! The operator CLI, as the real `outboxd` binary, against a real database on both
//! backends: `reconcile list | show | resolve` (each resolution, the refusals and the
//! already-resolved error), `intents list | show | cancel`, `audit` and `prune`.

use crate::support;

use outboxd::fake_provider::{Fault, FaultRule, Matcher};
use outboxd::intent::{IntentId, IntentState};
use outboxd::store::{ReconciliationItemId, TenantScope};
use outboxd::NewIntent;
use serde_json::json;
use support::cli::Cli;
use support::harness::{exec, operation, tenant, Harness, NOTIFY, REFUND};
use support::TestDb;

/// A not-idempotent intent whose response was lost: unknown, with one open item.
/// Returns (intent id, item id).
async fn unknown_intent(h: &Harness, tenant: &str, op: &str) -> (IntentId, ReconciliationItemId) {
    let r = h
        .enqueue(NewIntent::new(tenant, op, NOTIFY, json!({"op": op})))
        .await;
    h.provider.push_fault(FaultRule {
        matcher: Matcher::Key(r.idempotency_key.clone()),
        fault: Fault::LoseResponseAfterApply,
        times: 1,
    });
    h.dispatcher.drain().await.unwrap();
    let items = h
        .store
        .reconciliation_for_intent(r.intent_id)
        .await
        .unwrap();
    assert_eq!(h.intent(r.intent_id).await.state, IntentState::Unknown);
    (r.intent_id, items[0].id)
}

/// `reconcile resolve ID <rest...>`.
fn resolve<'a>(id: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    [&["reconcile", "resolve", id][..], rest].concat()
}

async fn list_the_queue_and_intents(t: &TestDb) {
    let h = Harness::new(t).await;
    let cli = Cli::new(t);
    let (_, item_a) = unknown_intent(&h, "acme", "op-list-a").await;
    let (_, item_b) = unknown_intent(&h, "globex", "op-list-b").await;
    let table = cli.ok(&["reconcile", "list"]).await;
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("ID  ") && lines[0].contains("OPERATION"),
        "{table}"
    );
    assert!(lines[1].starts_with(&format!("{item_a} ")) && lines[1].contains("op-list-a"));
    assert!(lines[2].starts_with(&format!("{item_b} ")) && lines[2].contains("globex"));
    let listed = cli.json(&["reconcile", "list", "--json"]).await;
    let ids: Vec<ReconciliationItemId> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|i| ReconciliationItemId::new(i["id"].as_i64().unwrap()))
        .collect();
    assert_eq!(ids, vec![item_a, item_b]);
    let limited = cli
        .json(&["reconcile", "list", "--limit", "1", "--json"])
        .await;
    assert_eq!(limited.as_array().unwrap().len(), 1);
    let none = cli.ok(&["reconcile", "list", "--action", REFUND]).await;
    assert!(none.contains("queue is empty"), "{none}");

    let unknown = cli
        .json(&["intents", "list", "--state", "unknown", "--json"])
        .await;
    assert_eq!(unknown.as_array().unwrap().len(), 2);
    let globex = cli.ok(&["intents", "list", "--tenant", "globex"]).await;
    assert!(
        globex.contains("op-list-b") && !globex.contains("op-list-a"),
        "{globex}"
    );
    let err = cli.fails(&["intents", "list", "--state", "lost"]).await;
    assert!(err.contains("expected one of pending"), "{err}");
}

async fn show_an_item_and_an_intent(t: &TestDb) {
    let h = Harness::new(t).await;
    let cli = Cli::new(t);
    let (intent_id, item) = unknown_intent(&h, "acme", "op-show").await;
    let shown = cli.ok(&["reconcile", "show", &item.to_string()]).await;
    let key = h.intent(intent_id).await.idempotency_key;
    for expected in [
        format!("reconciliation item {item} (open)"),
        format!("intent {intent_id}"),
        String::from(key),
        "attempts".into(),
        "ambiguous".into(),
        "dispatcher-a".into(),
        "resolve with: outboxd reconcile resolve".into(),
    ] {
        assert!(
            shown.contains(&expected),
            "missing {expected:?} in\n{shown}"
        );
    }
    let detail = cli
        .json(&["reconcile", "show", &item.to_string(), "--json"])
        .await;
    assert_eq!(detail["item"]["id"], item.get());
    assert_eq!(detail["intent"]["state"], "unknown");
    assert_eq!(detail["attempts"][0]["class"], "ambiguous");
    let err = cli.fails(&["reconcile", "show", "999999"]).await;
    assert!(err.contains("no reconciliation item 999999"), "{err}");
    let intent = cli.ok(&["intents", "show", &intent_id.to_string()]).await;
    assert!(
        intent.contains(&format!("intent {intent_id}")) && intent.contains("reconciliation items"),
        "{intent}"
    );
    let err = cli.fails(&["intents", "show", "999999"]).await;
    assert!(err.contains("no intent 999999"), "{err}");
}

async fn resolve_each_way(t: &TestDb) {
    let h = Harness::new(t).await;
    let cli = Cli::new(t);
    let (delivered, item_d) = unknown_intent(&h, "acme", "op-d").await;
    let (redispatched, item_r) = unknown_intent(&h, "acme", "op-r").await;
    let (abandoned, item_a) = unknown_intent(&h, "acme", "op-a").await;
    let (item_d, item_r, item_a) = (item_d.to_string(), item_r.to_string(), item_a.to_string());
    let note = "seen in the dashboard";
    let args = ["--as", "delivered", "--ref", "ref_1", "--note", note];
    let out = cli.ok(&resolve(&item_d, &args)).await;
    assert!(
        out.contains("as delivered (ref ref_1), by cli:tester"),
        "{out}"
    );
    let args = [
        "--as",
        "redispatch",
        "--note",
        "never received",
        "--actor",
        "ops-bob",
        "--confirm-may-act-twice",
    ];
    cli.ok(&resolve(&item_r, &args)).await;
    let args = ["--as", "abandoned", "--note", "refunded by hand", "--json"];
    let json = cli.json(&resolve(&item_a, &args)).await;
    assert_eq!(json["resolution"], "abandoned");
    let d = h.intent(delivered).await;
    assert_eq!(
        (d.state, d.provider_ref.as_deref()),
        (IntentState::Delivered, Some("ref_1"))
    );
    assert_eq!(h.intent(redispatched).await.state, IntentState::Pending);
    assert_eq!(h.intent(abandoned).await.state, IntentState::Abandoned);
    let audit = cli.json(&["audit", "--json"]).await;
    let actors: Vec<&str> = audit
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["actor"].as_str().unwrap())
        .collect();
    assert_eq!(actors, vec!["cli:tester", "ops-bob", "cli:tester"]);
    let table = cli.ok(&["audit", "--limit", "2"]).await;
    assert_eq!(table.lines().count(), 3, "{table}");
    assert!(table.contains("reconciliation.resolve") && table.contains("refunded by hand"));
    let queue = cli.ok(&["reconcile", "list"]).await;
    assert_eq!(queue.trim(), "the reconciliation queue is empty");
}

async fn refusals_and_already_resolved(t: &TestDb) {
    let h = Harness::new(t).await;
    let cli = Cli::new(t);
    let (intent_id, item) = unknown_intent(&h, "acme", "op-twice").await;
    let id = item.to_string();
    for (args, expected) in [
        (
            vec!["--as", "delivered", "--note", "n"],
            "--as delivered needs --ref",
        ),
        (
            vec!["--as", "abandoned", "--ref", "r", "--note", "n"],
            "--ref only goes with",
        ),
        (vec!["--as", "abandoned"], "--note"),
        (
            vec!["--as", "abandoned", "--note", "  "],
            "--note must say why",
        ),
        (
            vec!["--as", "sideways", "--note", "n"],
            "invalid value 'sideways'",
        ),
    ] {
        let err = cli.fails(&resolve(&id, &args)).await;
        assert!(err.contains(expected), "{args:?}: {err}");
    }
    let err = cli
        .fails(&resolve("424242", &["--as", "abandoned", "--note", "n"]))
        .await;
    assert!(err.contains("no reconciliation item 424242"), "{err}");
    assert_eq!(
        h.intent(intent_id).await.state,
        IntentState::Unknown,
        "nothing changed"
    );

    let args = [
        "--as",
        "abandoned",
        "--note",
        "duplicate",
        "--actor",
        "ops-alice",
    ];
    cli.ok(&resolve(&id, &args)).await;
    let args = [
        "--as",
        "delivered",
        "--ref",
        "r9",
        "--note",
        "late",
        "--actor",
        "ops-carol",
    ];
    let err = cli.fails(&resolve(&id, &args)).await;
    let expected =
        format!("reconciliation item {item} was already resolved as abandoned by ops-alice at");
    assert!(
        err.contains(&expected) && err.contains("nothing changed"),
        "{err}"
    );
    assert_eq!(h.intent(intent_id).await.state, IntentState::Abandoned);
    let audit = h
        .store
        .list_audit(&TenantScope::All, None, 10)
        .await
        .unwrap();
    assert_eq!(audit.len(), 1, "only the winning resolution is audited");
}

async fn cancel_a_pending_intent(t: &TestDb) {
    let h = Harness::new(t).await;
    let cli = Cli::new(t);
    let later = chrono::Utc::now() + chrono::Duration::hours(1);
    let intent = NewIntent::new("acme", "op-cancel", REFUND, json!({})).with_not_before(later);
    let r = h.enqueue(intent).await;
    let id = r.intent_id.to_string();
    let err = cli.fails(&["intents", "cancel", &id]).await;
    assert!(err.contains("--note"), "{err}");
    let out = cli
        .ok(&["intents", "cancel", &id, "--note", "customer withdrew"])
        .await;
    let expected = format!("cancelled intent {id} (acme / op-cancel), by cli:tester");
    assert!(out.contains(&expected), "{out}");
    assert_eq!(h.intent(r.intent_id).await.state, IntentState::Cancelled);
    let err = cli
        .fails(&["intents", "cancel", &id, "--note", "again"])
        .await;
    assert!(
        err.contains(&format!("intent {id} is cancelled")) && err.contains("only a pending intent"),
        "{err}"
    );
    let err = cli
        .fails(&["intents", "cancel", "424242", "--note", "n"])
        .await;
    assert!(err.contains("no intent 424242"), "{err}");
    let audit = h
        .store
        .list_audit(&TenantScope::All, None, 10)
        .await
        .unwrap();
    assert_eq!(audit.len(), 1);
    assert_eq!(
        (audit[0].action.as_str(), audit[0].actor.as_str()),
        ("intent.cancel", "cli:tester")
    );
}

async fn prune_runs_the_retention_job(t: &TestDb) {
    let h = Harness::new(t).await;
    let cli = Cli::new(t);
    let old = h
        .enqueue(NewIntent::new("acme", "op-old", REFUND, json!({})))
        .await;
    h.enqueue(NewIntent::new("acme", "op-new", REFUND, json!({})))
        .await;
    h.dispatcher.drain().await.unwrap();
    exec(
        &h.db,
        "UPDATE outbox_intents SET finished_at = finished_at - 2592000000 WHERE operation_id = 'op-old'",
        "UPDATE outbox_intents SET finished_at = finished_at - interval '30 days' WHERE operation_id = 'op-old'",
    )
    .await;
    let dry = cli.ok(&["prune", "--dry-run"]).await;
    assert!(dry.contains("would prune 1 finished intent(s)"), "{dry}");
    assert!(dry.contains("nothing was changed"), "{dry}");
    assert!(h.store.get_intent(old.intent_id).await.unwrap().is_some());
    let done = cli.ok(&["prune"]).await;
    assert!(done.contains("pruned 1 finished intent(s)"), "{done}");
    assert!(h.store.get_intent(old.intent_id).await.unwrap().is_none());
    assert!(h
        .store
        .find_tombstone(&tenant("acme"), &operation("op-old"))
        .await
        .unwrap()
        .is_some());
    assert!(h
        .store
        .find_intent(&tenant("acme"), &operation("op-new"))
        .await
        .unwrap()
        .is_some());
}

both_backends!(
    list_the_queue_and_intents,
    show_an_item_and_an_intent,
    resolve_each_way,
    refusals_and_already_resolved,
    cancel_a_pending_intent,
    prune_runs_the_retention_job,
);
