//! Running the real `outboxd` binary in tests: a config file pointing at the test database
//! and the fake provider, process start, SIGTERM and SIGKILL, and waiting (with a deadline,
//! never a fixed sleep) until the outbox is settled.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use outboxd::fake_provider::FakeProvider;
use outboxd::store::Database;

use super::harness::scalar;

/// Writes a daemon config for `db_url` and `provider` into `dir`.
pub fn write_config(
    dir: &std::path::Path,
    name: &str,
    db_url: &str,
    provider: &FakeProvider,
) -> PathBuf {
    let text = format!(
        r#"
[database]
url = "{db_url}"
max_connections = 4

[dispatcher]
owner = "{name}"
batch_size = 20
concurrency = 16
lease = "3s"
poll_interval = "100ms"
shutdown_grace = "2s"
release_expired_every = "1s"

[admin]
listen = "127.0.0.1:0"

[logging]
format = "json"
level = "warn"

[providers.fake]
base_url = "{base}"
connect_timeout = "300ms"
request_timeout = "1s"
key_retention = "24h"
allow_private_addresses = true

[actions.issue_refund]
provider = "fake"
method = "POST"
path = "/keyed/refunds"
retry_safety = "idempotent_with_key"
reference_pointer = "/id"
[actions.issue_refund.retry]
max_attempts = 20
initial_backoff = "10ms"
max_backoff = "200ms"
deadline = "1h"
max_retry_after = "1s"

[actions.send_notification]
provider = "fake"
method = "POST"
path = "/unkeyed/notifications"
retry_safety = "not_idempotent"
reference_pointer = "/id"
[actions.send_notification.retry]
max_attempts = 20
initial_backoff = "10ms"
max_backoff = "200ms"
deadline = "1h"
max_retry_after = "1s"
"#,
        base = provider.base_url()
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).expect("write config");
    path
}

/// The daemon's log file, next to its config (`<config>.log`), appended to across restarts.
pub fn log_file(config: &std::path::Path) -> Stdio {
    let path = config.with_extension("log");
    match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    {
        Ok(file) => Stdio::from(file),
        Err(_) => Stdio::null(),
    }
}

/// A running `outboxd run` process.
pub struct Daemon {
    /// The child process.
    pub child: Child,
}

impl Daemon {
    /// Starts `outboxd run --config <config>`.
    pub fn start(config: &std::path::Path) -> Daemon {
        let child = Command::new(env!("CARGO_BIN_EXE_outboxd"))
            .arg("run")
            .arg("--config")
            .arg(config)
            .env_remove("OUTBOXD_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file(config))
            .spawn()
            .expect("start outboxd");
        Daemon { child }
    }

    /// SIGKILL: no chance to clean up.
    pub fn kill_hard(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGSTOP / SIGCONT.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status();
        assert!(status.is_ok_and(|s| s.success()), "kill -{signal} failed");
    }

    /// SIGTERM, then waits for the exit; returns whether it exited 0.
    pub fn terminate(mut self) -> bool {
        self.signal("TERM");
        self.child.wait().map(|s| s.success()).unwrap_or(false)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Intents not yet delivered, failed, unknown or otherwise finished.
pub async fn unsettled(db: &Database) -> i64 {
    scalar(
        db,
        "SELECT count(*) FROM outbox_intents WHERE state IN ('pending', 'in_flight')",
    )
    .await
}

/// Waits until nothing is pending or in flight, up to `deadline`.
pub async fn wait_settled(db: &Database, deadline: Duration) -> bool {
    let until = tokio::time::Instant::now() + deadline;
    while tokio::time::Instant::now() < until {
        if unsettled(db).await == 0 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}
