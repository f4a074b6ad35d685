//! `outboxd run` serves the whole admin surface on `admin.listen`: health, readiness,
//! metrics, the `/v1` API (bearer tokens from the configuration) and the review page.

use crate::support;

use std::time::Duration;

use support::daemon::{admin_addr, listener_addr, log_file, wait_settled, TERMINATE_TIMEOUT};
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
    let http = support::admin::http_client();
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

/// With `[admin] metrics_listen`, `/metrics` is served on that listener alone; the admin
/// listener answers 404 for it and still serves health, the API and `x-request-id`. The
/// JSON log lists each span once (`spans`, no `span`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_listen_serves_metrics_on_its_own_port() {
    let t = TestDb::sqlite().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("metrics.toml");
    std::fs::write(
        &config,
        format!(
            // sqlx logs each statement at debug: the scrape's queries log inside the
            // request's span.
            "[database]\nurl = \"{}\"\n[logging]\nformat = \"json\"\n\
             level = \"info,sqlx::query=debug\"\n\
             [admin]\nlisten = \"127.0.0.1:0\"\nmetrics_listen = \"127.0.0.1:0\"\n",
            t.url
        ),
    )
    .unwrap();
    let mut daemon = support::daemon::Daemon::start(&config);
    let limit = Duration::from_secs(30);
    let admin = admin_addr(&config, limit).expect("admin server listening");
    let scrape = listener_addr(&config, "metrics server", limit).expect("metrics server listening");
    assert_ne!(admin, scrape);
    let http = support::admin::http_client();
    let metrics = http
        .get(format!("http://{scrape}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status(), 200);
    assert!(metrics.headers().contains_key("x-request-id"));
    assert!(metrics.text().await.unwrap().contains("outboxd_"));
    let on_admin = http
        .get(format!("http://{admin}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        on_admin.status(),
        404,
        "the admin listener no longer serves /metrics"
    );
    let health = http
        .get(format!("http://{admin}/healthz"))
        .send()
        .await
        .unwrap();
    assert!(health.status().is_success());
    assert!(health.headers().contains_key("x-request-id"));
    let api = http
        .get(format!("http://{scrape}/v1/intents"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        api.status(),
        404,
        "the metrics listener serves nothing else"
    );
    daemon.assert_running("after the scrapes");
    assert!(daemon.terminate(), "exit 0 after SIGTERM");
    let log = std::fs::read_to_string(config.with_extension("log")).unwrap();
    let mut in_request = 0;
    for line in log.lines() {
        let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        assert!(value.get("span").is_none(), "a span printed twice: {line}");
        let spans = value["spans"].as_array().cloned().unwrap_or_default();
        if spans.iter().any(|s| s["name"] == "request") {
            in_request += 1;
            let request = spans.iter().filter(|s| s["name"] == "request").count();
            assert_eq!(request, 1, "the request span once: {line}");
            assert!(spans[0]["request_id"].is_string(), "{line}");
        }
    }
    assert!(in_request > 0, "no line logged inside a request:\n{log}");
}
