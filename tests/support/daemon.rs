//! Running the real `outboxd` binary in tests: a config file pointing at the test database
//! and the fake provider, process start, SIGTERM and SIGKILL, and waiting (with a deadline,
//! never a fixed sleep) until the outbox is settled.

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

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

    /// How the process ended, if it has (`None`: still running).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("try_wait")
    }

    /// Panics if the process is no longer running: a replica that dies fails the test.
    pub fn assert_running(&mut self, label: &str) {
        if let Some(status) = self.exited() {
            panic!("{label}: outboxd (pid {}) died: {status}", self.child.id());
        }
    }

    /// SIGTERM, then waits up to [`TERMINATE_TIMEOUT`] for the exit; returns whether it
    /// exited 0 in time (a process still running then is killed and counts as a failure).
    pub fn terminate(mut self) -> bool {
        if self.exited().is_some() {
            return false;
        }
        self.signal("TERM");
        let until = Instant::now() + TERMINATE_TIMEOUT;
        while Instant::now() < until {
            if let Some(status) = self.exited() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!(
            "outboxd (pid {}) still running {TERMINATE_TIMEOUT:?} after SIGTERM; killing it",
            self.child.id()
        );
        false
    }
}

/// How long [`Daemon::terminate`] waits for a graceful exit (the configs' shutdown grace
/// is 2 s).
pub const TERMINATE_TIMEOUT: Duration = Duration::from_secs(30);

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

/// In-flight claims dispatcher `owner` (its `[dispatcher] owner`) holds with an attempt
/// open (claimed to be sent, not taken over after a lease expiry).
pub async fn claims_held_by(db: &Database, owner: &str) -> i64 {
    let sql = format!(
        "SELECT count(*) FROM outbox_intents WHERE state = 'in_flight' AND lease_owner = '{owner}' \
         AND attempt_started_at IS NOT NULL"
    );
    scalar(db, &sql).await
}

/// Waits, checking every millisecond, until dispatcher `owner` holds an open attempt or
/// `until` passes. A daemon watched while it runs freely is caught holding one; one kept
/// frozen most of the time rarely wins a claim beside a replica that runs freely.
pub async fn wait_until_holding(db: &Database, owner: &str, until: Instant) {
    while claims_held_by(db, owner).await == 0 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// How long a frozen daemon's last statement, already sent, may take to finish on the
/// server (it may record the outcomes of the attempts we are about to count).
const STATEMENT_SETTLE: Duration = Duration::from_millis(200);

/// SIGKILLs `daemon` (dispatcher `owner`) while it has attempts open: watches it run
/// until it holds one, freezes it (SIGSTOP), lets a statement it already sent finish,
/// counts its open attempts again, and kills it frozen if there are any, else lets it run
/// and tries again, up to `limit`. Returns the open attempts it left behind, counted after
/// the kill (0: it never had any within `limit`).
pub async fn kill_mid_attempt(daemon: Daemon, db: &Database, owner: &str, limit: Duration) -> i64 {
    let until = Instant::now() + limit;
    loop {
        wait_until_holding(db, owner, until).await;
        daemon.signal("STOP");
        tokio::time::sleep(STATEMENT_SETTLE).await;
        let open = claims_held_by(db, owner).await;
        if open > 0 || Instant::now() >= until {
            daemon.kill_hard();
            return claims_held_by(db, owner).await;
        }
        daemon.signal("CONT");
    }
}

/// Lines of the daemon's log (`<config>.log`) containing `needle`.
pub fn log_lines_containing(config: &std::path::Path, needle: &str) -> usize {
    std::fs::read_to_string(config.with_extension("log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(needle))
        .count()
}

/// The address the daemon's admin server bound (`admin.listen` may say port 0), read from
/// its JSON log (`<config>.log`, `[logging] format = "json"`, level info), waiting up to
/// `limit`.
pub fn admin_addr(config: &std::path::Path, limit: Duration) -> Option<std::net::SocketAddr> {
    listener_addr(config, "admin server", limit)
}

/// The address the daemon's listener `name` (`admin server`, `metrics server`) bound, read
/// from its JSON log like [`admin_addr`].
pub fn listener_addr(
    config: &std::path::Path,
    name: &str,
    limit: Duration,
) -> Option<std::net::SocketAddr> {
    let needle = format!("{name} listening");
    let until = Instant::now() + limit;
    while Instant::now() < until {
        let text = std::fs::read_to_string(config.with_extension("log")).unwrap_or_default();
        let found = text
            .lines()
            .filter(|l| l.contains(&needle))
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find_map(|v| v["addr"].as_str()?.parse().ok());
        if found.is_some() {
            return found;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}
