//! The CLI cannot hurt: the real `outboxd` binary against a wrong SQLite path creates no
//! file and exits 4 with the resolved path and "run `outboxd migrate`"; an unmigrated
//! database says the same on both backends; every command's `--json` parses (errors too,
//! with the documented exit code); `reconcile list --tenant/--after` filter on both
//! backends; colour follows `NO_COLOR`; commands that use no admin token or provider
//! secret do not need their variables.

use crate::support;

use outboxd::fake_provider::{Fault, FaultRule, Matcher};
use outboxd::intent::IntentId;
use outboxd::store::ReconciliationItemId;
use outboxd::NewIntent;
use serde_json::{json, Value};
use support::cli::{texts, Cli};
use support::harness::{Harness, NOTIFY};
use support::TestDb;

/// Exit codes of `docs/cli.md`.
const USAGE: i32 = 2;
const CONFIG: i32 = 3;
const DATABASE: i32 = 4;
const NOT_FOUND: i32 = 5;
const CONFLICT: i32 = 6;

/// How many lines of `stderr` report an error.
fn errors(stderr: &str) -> usize {
    stderr.lines().filter(|l| l.starts_with("error:")).count()
}

/// A config naming a SQLite file that does not exist (in a temp dir that does).
fn missing_sqlite() -> (Cli, std::path::PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outboxd-typo.db");
    let cli = Cli::for_url(&format!("sqlite://{}", path.display()), "");
    (cli, path, dir)
}

#[tokio::test]
async fn commands_on_a_missing_sqlite_file_create_nothing() {
    let (cli, path, _dir) = missing_sqlite();
    let commands: [&[&str]; 6] = [
        &["status"],
        &["reconcile", "list"],
        &["intents", "list"],
        &["intents", "cancel", "1", "--note", "x"],
        &["audit"],
        &[
            "enqueue",
            "--tenant",
            "acme",
            "--operation-id",
            "op-1",
            "--action",
            "notify",
            "--payload",
            "{}",
        ],
    ];
    for args in commands {
        let (stdout, stderr) = cli.exits(args, DATABASE).await;
        assert!(!path.exists(), "{args:?} created {}", path.display());
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
        assert_eq!(errors(&stderr), 1, "{args:?}: one error line:\n{stderr}");
        assert!(
            stderr.contains("error: no database file at ")
                && stderr.contains(&path.display().to_string())
                && stderr.contains("run `outboxd migrate`"),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("no such table"), "{stderr}");
    }
    let out = cli.run(&["status", "--json"]).await;
    assert_eq!(out.status.code(), Some(DATABASE));
    let (stdout, _) = texts(&out);
    let error: Value = serde_json::from_str(&stdout).expect("error JSON");
    assert_eq!(error["error"]["kind"], "database");
    assert_eq!(error["error"]["exit_code"], DATABASE);
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .contains("outboxd migrate"));
    assert!(!path.exists());
    // migrate is the command that creates it.
    let migrated = cli.json(&["migrate", "--json"]).await;
    assert!(path.exists());
    assert!(!migrated["applied"].as_array().unwrap().is_empty());
    let status = cli.json(&["status", "--json"]).await;
    assert_eq!(status["by_state"]["pending"], 0);
}

async fn unmigrated_database_says_run_migrate(t: &TestDb) {
    let cli = Cli::new(t);
    for args in [
        &["status"][..],
        &["reconcile", "list"],
        &["audit", "--json"],
    ] {
        let (_, stderr) = cli.exits(args, DATABASE).await;
        assert!(
            stderr.contains("schema is at version 0") && stderr.contains("run `outboxd migrate`"),
            "{args:?}: {stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unmigrated_sqlite_says_run_migrate() {
    unmigrated_database_says_run_migrate(&TestDb::sqlite_at(0).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unmigrated_postgres_says_run_migrate() {
    if let Some(t) = TestDb::postgres_at(0).await {
        unmigrated_database_says_run_migrate(&t).await;
    }
}

/// A not-idempotent intent whose response was lost: unknown, one open item. Returns
/// (intent id, item id).
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
    (r.intent_id, items[0].id)
}

fn ids(listed: &Value) -> Vec<ReconciliationItemId> {
    listed
        .as_array()
        .unwrap()
        .iter()
        .map(|i| ReconciliationItemId::new(i["id"].as_i64().unwrap()))
        .collect()
}

async fn reconcile_list_filters_by_tenant_and_after(t: &TestDb) {
    let h = Harness::new(t).await;
    let cli = Cli::new(t);
    let (_, a1) = unknown_intent(&h, "acme", "op-f-1").await;
    let (_, g1) = unknown_intent(&h, "globex", "op-f-2").await;
    let (_, a2) = unknown_intent(&h, "acme", "op-f-3").await;
    let all = cli.json(&["reconcile", "list", "--json"]).await;
    assert_eq!(ids(&all), vec![a1, g1, a2]);
    let acme = cli
        .json(&["reconcile", "list", "--tenant", "acme", "--json"])
        .await;
    assert_eq!(ids(&acme), vec![a1, a2]);
    let after = cli
        .json(&["reconcile", "list", "--after", &a1.to_string(), "--json"])
        .await;
    assert_eq!(ids(&after), vec![g1, a2]);
    let both = [
        "reconcile",
        "list",
        "--tenant",
        "acme",
        "--after",
        &a1.to_string(),
    ];
    let page = cli.json(&[&both[..], &["--json"]].concat()).await;
    assert_eq!(ids(&page), vec![a2]);
    let text = cli.ok(&["reconcile", "list", "--limit", "1"]).await;
    assert!(
        text.contains(&format!("--after {a1} for the next page")),
        "{text}"
    );
    let none = cli
        .json(&["reconcile", "list", "--tenant", "initech", "--json"])
        .await;
    assert_eq!(ids(&none), Vec::<ReconciliationItemId>::new());
}

async fn every_command_speaks_json(t: &TestDb) {
    let h = Harness::new(t).await;
    let cli = Cli::new(t);
    let (intent, item) = unknown_intent(&h, "acme", "op-json").await;
    let (intent, item) = (intent.to_string(), item.to_string());
    let migrated = cli.json(&["migrate", "--json"]).await;
    assert_eq!(migrated["applied"], json!([]));
    assert!(migrated["schema_version"].as_i64().unwrap() >= 3);
    let status = cli.json(&["status", "--json"]).await;
    assert_eq!(status["by_state"]["unknown"], 1);
    assert_eq!(status["reconciliation"]["open"], 1);
    assert_eq!(status["schema_version"], migrated["schema_version"]);
    let receipt = cli
        .json(&[
            "enqueue",
            "--json",
            "--tenant",
            "acme",
            "--operation-id",
            "op-json-2",
            "--action",
            NOTIFY,
            "--payload",
            "{\"a\":1}",
        ])
        .await;
    let pending = receipt["intent_id"].as_i64().unwrap().to_string();
    assert_eq!(receipt["replayed"], false);
    assert!(cli.json(&["intents", "list", "--json"]).await.is_array());
    assert_eq!(
        cli.json(&["intents", "show", &intent, "--json"]).await["intent"]["state"],
        "unknown"
    );
    let cancelled = cli
        .json(&["intents", "cancel", &pending, "--note", "test", "--json"])
        .await;
    assert_eq!(cancelled["state"], "cancelled");
    assert!(cli.json(&["reconcile", "list", "--json"]).await.is_array());
    assert_eq!(
        cli.json(&["reconcile", "show", &item, "--json"]).await["item"]["id"].to_string(),
        item
    );
    assert!(cli.json(&["audit", "--json"]).await.is_array());
    let preview = cli.json(&["prune", "--dry-run", "--json"]).await;
    assert!(preview.is_object(), "{preview}");
    let pruned = cli.json(&["prune", "--json"]).await;
    assert!(pruned.is_object(), "{pruned}");
    let check = cli.json(&["config", "check", "--json"]).await;
    assert_eq!(check["ok"], true);

    // Failures: the error object on stdout and the documented exit code.
    let cases: [(&[&str], i32, &str); 4] = [
        (
            &["intents", "show", "999999", "--json"],
            NOT_FOUND,
            "not_found",
        ),
        (
            &["intents", "cancel", &pending, "--note", "again", "--json"],
            CONFLICT,
            "conflict",
        ),
        (
            &[
                "reconcile",
                "resolve",
                &item,
                "--as",
                "delivered",
                "--note",
                "n",
                "--json",
            ],
            USAGE,
            "usage",
        ),
        (
            &[
                "enqueue",
                "--json",
                "--tenant",
                "acme",
                "--operation-id",
                "op-json-2",
                "--action",
                NOTIFY,
                "--payload",
                "{\"a\":2}",
            ],
            CONFLICT,
            "conflict",
        ),
    ];
    for (args, code, kind) in cases {
        let (stdout, stderr) = cli.exits(args, code).await;
        let error: Value =
            serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {stdout}"));
        assert_eq!(error["error"]["kind"], kind, "{args:?}");
        assert_eq!(error["error"]["exit_code"], code, "{args:?}");
        assert_eq!(errors(&stderr), 1, "{args:?}: {stderr}");
    }
    // clap's own usage errors are 2 as well.
    cli.exits(&["intents", "list", "--state", "lost"], USAGE)
        .await;
}

#[tokio::test]
async fn a_config_error_is_exit_3_and_printed_once() {
    let cli = Cli::for_url("sqlite://x.db", "[dispatcher]\nbatch_size = 0\n");
    let (_, stderr) = cli.exits(&["status"], CONFIG).await;
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("error: dispatcher.batch_size"),
        "{stderr}"
    );
}

#[tokio::test]
async fn colour_follows_no_color() {
    let (cli, _, _dir) = missing_sqlite();
    let escape = "\x1b[";
    let forced = cli.run_env(&["status"], &[("CLICOLOR_FORCE", "1")]).await;
    assert!(texts(&forced).1.contains(escape), "CLICOLOR_FORCE colours");
    let plain = cli.run(&["status"]).await;
    assert!(!texts(&plain).1.contains(escape), "not a terminal: plain");
    let no_color = cli
        .run_env(&["status"], &[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")])
        .await;
    assert!(!texts(&no_color).1.contains(escape), "NO_COLOR wins");
}

async fn commands_without_tokens_need_no_token_variables(t: &TestDb) {
    let h = Harness::new(t).await;
    unknown_intent(&h, "acme", "op-tokens").await;
    let extra = "[[admin.tokens]]\nname = \"ops\"\ntoken_env = \"OBX_UNSET_TOKEN\"\n\
                 role = \"operator\"\ntenants = [\"*\"]\n\
                 [providers.pay]\nbase_url = \"https://pay.example.com\"\n\
                 [providers.pay.headers]\nAuthorization = { value_env = \"OBX_UNSET_AUTH\" }\n";
    let cli = Cli::for_url(&t.url, extra);
    let listed = cli.json(&["reconcile", "list", "--json"]).await;
    assert_eq!(listed.as_array().unwrap().len(), 1);
    cli.json(&[
        "enqueue",
        "--tenant",
        "acme",
        "--operation-id",
        "op-tokens-2",
        "--action",
        NOTIFY,
        "--payload",
        "{}",
    ])
    .await;
    cli.json(&["status", "--json"]).await;
    // `config check` reads every secret, unless told not to.
    let (_, stderr) = cli.exits(&["config", "check"], CONFIG).await;
    assert!(stderr.contains("OBX_UNSET_TOKEN is not set"), "{stderr}");
    cli.ok(&["config", "check", "--no-secrets"]).await;
}

both_backends!(
    reconcile_list_filters_by_tenant_and_after,
    every_command_speaks_json,
    commands_without_tokens_need_no_token_variables,
);

#[tokio::test]
async fn a_cause_is_printed_once() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("run.db").display());
    let extra = "[providers.p]\nbase_url = \"https://p.example.com\"\n\
                 connect_timeout = \"10s\"\nrequest_timeout = \"10s\"\n";
    let cli = Cli::for_url(&url, extra);
    let (_, stderr) = cli.exits(&["run"], CONFIG).await;
    let error = stderr
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(error.contains("connect_timeout (10s)"), "{error}");
    assert_eq!(error.matches("ambiguous").count(), 1, "{error}");
}
