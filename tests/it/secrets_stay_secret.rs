//! Secrets (provider auth headers, signing secrets, admin tokens, database passwords) are
//! used where they belong and never appear in logs or printed configuration.

use crate::support;

use std::process::Command;
use std::time::Duration;

use outboxd::fake_provider::{FakeProvider, FakeProviderOptions};
use outboxd::NewIntent;
use serde_json::json;
use support::daemon::{log_file, wait_settled};
use support::harness::enqueue_committed;
use support::TestDb;

const AUTH: &str = "Bearer sk_live_SECRET_AUTH_4f9a2c";
const SIGNING: &str = "whsec_c2VjcmV0LXNpZ25pbmcta2V5LTEyMzQ1Njc4OTA=";
const TOKEN: &str = "admin-token-SECRET-0123456789abcdef";

fn config(db_url: &str, provider: &FakeProvider) -> String {
    format!(
        r#"
[database]
url = "{db_url}"
[dispatcher]
lease = "5s"
poll_interval = "100ms"
[admin]
listen = "127.0.0.1:0"
[[admin.tokens]]
name = "ops"
token_env = "TEST_ADMIN_TOKEN"
role = "operator"
tenants = ["*"]
[logging]
format = "json"
level = "trace,sqlx=debug,hyper=info,reqwest=debug"
[providers.fake]
base_url = "{base}"
connect_timeout = "300ms"
request_timeout = "1s"
allow_private_addresses = true
[providers.fake.headers]
Authorization = {{ value_env = "TEST_PROVIDER_AUTH" }}
[providers.fake.signing]
secret_env = "TEST_SIGNING_SECRET"
[actions.issue_refund]
provider = "fake"
method = "POST"
path = "/keyed/refunds"
retry_safety = "idempotent_with_key"
reference_pointer = "/id"
"#,
        base = provider.base_url()
    )
}

fn outboxd(args: &[&str], config: &std::path::Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_outboxd"));
    cmd.args(args)
        .arg("--config")
        .arg(config)
        .env("TEST_PROVIDER_AUTH", AUTH)
        .env("TEST_SIGNING_SECRET", SIGNING)
        .env("TEST_ADMIN_TOKEN", TOKEN);
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_never_reach_logs_or_printed_config() {
    let t = TestDb::sqlite().await;
    let provider = FakeProvider::start(FakeProviderOptions::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secret.toml");
    std::fs::write(&path, config(&t.url, &provider)).unwrap();

    let check = outboxd(&["config", "check"], &path).output().unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    // Secrets from variables print as those variables' names, never their values.
    for var in [
        "TEST_PROVIDER_AUTH",
        "TEST_SIGNING_SECRET",
        "TEST_ADMIN_TOKEN",
    ] {
        assert!(printed.contains(var), "{printed}");
    }
    for secret in [AUTH, SIGNING, TOKEN] {
        assert!(!printed.contains(secret), "config check printed a secret");
    }

    for i in 0..5 {
        enqueue_committed(
            &t.db,
            NewIntent::new("acme", format!("op-{i}"), "issue_refund", json!({"i": i})),
        )
        .await;
    }
    let mut child = outboxd(&["run"], &path)
        .stderr(log_file(&path))
        .spawn()
        .unwrap();
    let settled = wait_settled(&t.db, Duration::from_secs(60)).await;
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let _ = child.wait();
    assert!(settled);
    // The secrets were used...
    let request = &provider.requests()[0];
    assert_eq!(request.header("authorization"), Some(AUTH));
    assert!(request
        .header("webhook-signature")
        .is_some_and(|s| s.starts_with("v1,")));
    // ...and never logged, even at trace level.
    let logs = std::fs::read_to_string(path.with_extension("log")).unwrap();
    assert!(
        logs.len() > 1000,
        "expected verbose logs, got {} bytes",
        logs.len()
    );
    for secret in [AUTH, "sk_live_SECRET_AUTH", SIGNING, TOKEN] {
        assert!(!logs.contains(secret), "a secret appeared in the logs");
    }
    assert!(!logs.contains("\"i\":3"), "full payloads are not logged");
}

/// A database password in the URL's query string (`?password=`, `&sslpassword=`) or its
/// userinfo is never printed: not by `outboxd migrate`'s progress line, not in the
/// connection error it ends with.
#[test]
fn migrate_never_prints_a_database_password() {
    // A "server" that hangs up at once: the connection fails fast, without retries.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for socket in listener.incoming() {
            drop(socket);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let urls = [
        format!("postgres://u@127.0.0.1:{port}/db?password=hunter2query"),
        format!("postgres://u@127.0.0.1:{port}/db?sslmode=disable&sslpassword=hunter2query"),
        format!("postgres://u:hunter2query@127.0.0.1:{port}/db"),
    ];
    for url in urls {
        let path = dir.path().join("migrate.toml");
        std::fs::write(&path, format!("[database]\nurl = \"{url}\"\n")).unwrap();
        let output = outboxd(&["migrate"], &path).output().unwrap();
        let printed = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(!output.status.success(), "{printed}");
        assert!(printed.contains("migrating postgres://"), "{printed}");
        assert!(printed.contains("cannot open database"), "{printed}");
        assert!(!printed.contains("hunter2query"), "{url}: {printed}");
        assert!(printed.contains("[REDACTED]"), "{printed}");
    }
}
