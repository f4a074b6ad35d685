//! `outboxd run` serves the whole admin surface on `admin.listen`: health, readiness,
//! metrics, the `/v1` API (bearer tokens from the configuration) and the review page.

mod support;

use std::time::Duration;

use support::daemon::{admin_addr, log_file, wait_settled, TERMINATE_TIMEOUT};
use support::TestDb;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_serves_health_api_and_review_page() {
    let t = TestDb::sqlite().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("admin.toml");
    std::fs::write(
        &config,
        format!(
            "[database]\nurl = \"{}\"\n[logging]\nformat = \"json\"\nlevel = \"info\"\n\
             [admin]\nlisten = \"127.0.0.1:0\"\n\
             [[admin.tokens]]\nname = \"ops\"\ntoken_env = \"T_OPS\"\nrole = \"operator\"\ntenants = [\"*\"]\n",
            t.url
        ),
    )
    .unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_outboxd"))
        .args(["run", "--config"])
        .arg(&config)
        .env("T_OPS", "ops-token-0123456789abcdef")
        .stderr(log_file(&config))
        .spawn()
        .unwrap();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    // The OS picks the port; the daemon logs the address it bound.
    let addr = admin_addr(&config, Duration::from_secs(30)).expect("admin server listening");
    let base = format!("http://{addr}");
    let mut ready = false;
    for _ in 0..100 {
        if let Ok(r) = http.get(format!("{base}/readyz")).send().await {
            if r.status().is_success() {
                ready = true;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ready, "/readyz never answered 200");
    let health = http.get(format!("{base}/healthz")).send().await.unwrap();
    assert!(health.status().is_success());
    let metrics = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("outboxd_"), "{metrics}");
    let unauthorised = http
        .get(format!("{base}/v1/reconciliation"))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthorised.status(), 401);
    let queue = http
        .get(format!("{base}/v1/reconciliation"))
        .bearer_auth("ops-token-0123456789abcdef")
        .send()
        .await
        .unwrap();
    assert_eq!(queue.status(), 200);
    let enqueued = http
        .post(format!("{base}/v1/intents"))
        .bearer_auth("ops-token-0123456789abcdef")
        .json(&serde_json::json!({"tenant": "acme", "operation_id": "op-api", "action": "unconfigured", "payload": {"a": 1}}))
        .send()
        .await
        .unwrap();
    assert_eq!(enqueued.status(), 201);
    let page = http.get(format!("{base}/review")).send().await.unwrap();
    assert!(page.status().is_success());
    assert!(page.text().await.unwrap().contains("<form"));
    let _ = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let until = std::time::Instant::now() + TERMINATE_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if std::time::Instant::now() >= until {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        status.is_some_and(|s| s.success()),
        "exit 0 after SIGTERM: {status:?}"
    );
    assert!(
        !wait_settled(&t.db, Duration::from_millis(10)).await,
        "the unconfigured intent waits, pending"
    );
}
