//! The quick start, as three terminals would run it: `outboxd fake-provider`,
//! `outboxd run --config config/quickstart.toml`, `outboxd enqueue ...` and
//! `outboxd status` — real processes, a temporary working directory for the SQLite file,
//! free ports (port 0 plus environment overrides), and waits on conditions with deadlines.
//! Also checks health, readiness, metrics, the JSON log's attempt span, and that neither a
//! secret nor a payload ever reaches the output.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

const SECRET: &str = "Bearer qs-secret-never-printed-5521";
const PAYLOAD_MARKER: &str = "payload-marker-never-logged-7c1e";
const DEADLINE: Duration = Duration::from_secs(60);

/// Lines a child process writes, collected on a thread, waitable.
#[derive(Clone, Default)]
struct Lines(Arc<(Mutex<Vec<String>>, Condvar)>);

impl Lines {
    fn collect(stream: impl Read + Send + 'static) -> Lines {
        let lines = Lines::default();
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                eprintln!("  | {line}");
                let (store, changed) = &*sink.0;
                store.lock().unwrap().push(line);
                changed.notify_all();
            }
        });
        lines
    }

    /// The first line matching `pred`, waiting up to [`DEADLINE`].
    fn wait_for(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let (store, changed) = &*self.0;
        let until = Instant::now() + DEADLINE;
        let mut lines = store.lock().unwrap();
        loop {
            if let Some(line) = lines.iter().find(|l| pred(l)) {
                return line.clone();
            }
            let left = until.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "timed out waiting for {what}");
            lines = changed.wait_timeout(lines, left).unwrap().0;
        }
    }

    fn all(&self) -> String {
        self.0 .0.lock().unwrap().join("\n")
    }
}

/// A child process whose stdout and stderr are collected; killed on drop.
struct Proc {
    child: Child,
    stdout: Lines,
    stderr: Lines,
}

impl Proc {
    fn spawn(mut cmd: Command) -> Proc {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn outboxd");
        let stdout = Lines::collect(child.stdout.take().unwrap());
        let stderr = Lines::collect(child.stderr.take().unwrap());
        Proc {
            child,
            stdout,
            stderr,
        }
    }

    /// Sends `signal` and waits for the exit; whether it exited 0.
    fn stop(&mut self, signal: &str) -> bool {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid)
            .status();
        assert!(sent.is_ok_and(|s| s.success()), "kill -{signal}");
        let until = Instant::now() + DEADLINE;
        while Instant::now() < until {
            match self.child.try_wait() {
                Ok(Some(status)) => return status.success(),
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(_) => return false,
            }
        }
        eprintln!("still running {DEADLINE:?} after SIGTERM; killed");
        false
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn quickstart_toml() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("config/quickstart.toml")
}

/// `outboxd <args>` in `dir`, with only the given overrides in the environment.
fn outboxd(dir: &Path, provider_url: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_outboxd"));
    cmd.current_dir(dir)
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("OUTBOXD__ADMIN__LISTEN", "127.0.0.1:0")
        .env("OUTBOXD__LOGGING__FORMAT", "json")
        .env("OUTBOXD__PROVIDERS__LOCAL__BASE_URL", provider_url)
        .env(
            "OUTBOXD__PROVIDERS__LOCAL__HEADERS__AUTHORIZATION__VALUE_ENV",
            "QS_PROVIDER_AUTH",
        )
        .env("QS_PROVIDER_AUTH", SECRET);
    cmd
}

struct Ran {
    ok: bool,
    stdout: String,
    stderr: String,
}

fn run_once(mut cmd: Command) -> Ran {
    let out = cmd.output().expect("run outboxd");
    Ran {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn enqueue_args<'a>(config: &'a str, op: &'a str, payload: &'a str) -> Vec<&'a str> {
    vec![
        "enqueue",
        "--config",
        config,
        "--tenant",
        "acme",
        "--operation-id",
        op,
        "--action",
        "issue_refund",
        "--payload",
        payload,
    ]
}

fn get(url: &str) -> (u16, String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let response = crate::support::admin::http_client()
            .get(url)
            .send()
            .await
            .expect("GET");
        let status = response.status().as_u16();
        (status, response.text().await.unwrap_or_default())
    })
}

/// Waits until `outboxd status` shows `state` with `count`, polling with a deadline.
fn wait_for_status(stack: &Stack, state: &str, count: u32) {
    let until = Instant::now() + DEADLINE;
    let expected = [state.to_owned(), count.to_string()];
    loop {
        let ran = stack.run(&["status", "--config", &stack.config]);
        let shown = ran.stdout.lines().any(|l| {
            let cols: Vec<String> = l.split_whitespace().map(str::to_owned).collect();
            cols == expected
        });
        if shown {
            return;
        }
        assert!(
            Instant::now() < until,
            "status never showed {state} {count}:\n{}",
            ran.stdout
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Terminals 1 and 2: the fake provider and the daemon, both running.
struct Stack {
    dir: tempfile::TempDir,
    config: String,
    provider: Proc,
    provider_url: String,
    daemon: Proc,
    admin: String,
}

impl Stack {
    fn start() -> Stack {
        let dir = tempfile::tempdir().unwrap();
        let config = quickstart_toml().display().to_string();
        let args = ["fake-provider", "--listen", "127.0.0.1:0"];
        let provider = Proc::spawn(outboxd(dir.path(), "unused", &args));
        let prefix = "fake provider listening on ";
        let listening = provider
            .stdout
            .wait_for("the fake provider", |l| l.starts_with(prefix));
        let provider_url = listening.trim_start_matches(prefix).to_owned();
        let args = ["run", "--config", &config];
        let daemon = Proc::spawn(outboxd(dir.path(), &provider_url, &args));
        let listening = daemon
            .stderr
            .wait_for("the admin server", |l| l.contains("admin server listening"));
        let line: Value = serde_json::from_str(&listening).expect("JSON log line");
        let admin = format!("http://{}", line["addr"].as_str().expect("addr field"));
        Stack {
            dir,
            config,
            provider,
            provider_url,
            daemon,
            admin,
        }
    }

    /// Terminal 3: `outboxd <args>` with the same configuration and environment.
    fn run(&self, args: &[&str]) -> Ran {
        run_once(outboxd(self.dir.path(), &self.provider_url, args))
    }

    fn enqueue(&self, op: &str, payload: &str) -> Ran {
        self.run(&enqueue_args(&self.config, op, payload))
    }
}

/// Enqueue → delivered (seen by `outboxd status`); replay; conflict; invalid input.
fn enqueue_is_delivered_then_replayed(stack: &Stack, payload: &str) {
    let first = stack.enqueue("refund-1", payload);
    assert!(first.ok, "enqueue failed: {}", first.stderr);
    let receipt: Value = serde_json::from_str(&first.stdout).expect("JSON receipt");
    assert_eq!(receipt["replayed"], false);
    assert_eq!(receipt["state"], "pending");
    stack.provider.stdout.wait_for("the effect", |l| {
        l.starts_with("effect ref_1 on /keyed/refunds")
    });
    wait_for_status(stack, "delivered", 1);
    let replay = stack.enqueue("refund-1", payload);
    assert!(replay.ok, "{}", replay.stderr);
    let receipt: Value = serde_json::from_str(&replay.stdout).unwrap();
    assert_eq!(receipt["replayed"], true);
    assert_eq!(receipt["state"], "delivered");
    let conflict = stack.enqueue("refund-1", r#"{"order_id": 1, "amount": 9999}"#);
    assert!(!conflict.ok, "a conflict must exit non-zero");
    assert!(
        conflict.stderr.contains("error: conflict"),
        "{}",
        conflict.stderr
    );
    let invalid = stack.enqueue("refund-2", "{");
    assert!(!invalid.ok, "invalid JSON must exit non-zero");
    assert!(
        invalid.stderr.contains("--payload is not valid JSON"),
        "{}",
        invalid.stderr
    );
}

/// `/metrics` counts the delivery; the JSON log line carries the attempt span's fields.
fn metrics_and_logs_describe_the_delivery(stack: &Stack) {
    let (status, metrics) = get(&format!("{}/metrics", stack.admin));
    assert_eq!(status, 200);
    for expected in [
        r#"outboxd_attempts_total{action="issue_refund",provider="local",class="delivered"} 1"#,
        r#"outboxd_intents_finished_total{action="issue_refund",provider="local",state="delivered"} 1"#,
        r#"outboxd_action_configured{action="issue_refund",provider="local"} 1"#,
        "outboxd_outbox_stats_leader 1",
    ] {
        assert!(
            metrics.contains(expected),
            "missing {expected:?} in:\n{metrics}"
        );
    }
    let delivered = stack.daemon.stderr.wait_for("the delivery log line", |l| {
        l.contains(r#""message":"delivered""#)
    });
    let delivered: Value = serde_json::from_str(&delivered).unwrap();
    // Each enclosing span once, outermost first, under `spans` (no separate `span`).
    assert!(delivered.get("span").is_none(), "{delivered}");
    let span = delivered["spans"]
        .as_array()
        .and_then(|spans| spans.last())
        .unwrap_or_else(|| panic!("no spans: {delivered}"));
    assert_eq!(span["name"], "attempt");
    assert_eq!(span["tenant"], "acme");
    assert_eq!(span["action"], "issue_refund");
    assert_eq!(span["attempt"], 1);
    assert_eq!(span["class"], "delivered");
    assert!(span["intent_id"].is_i64(), "{span}");
}

#[test]
fn quickstart_flow_with_the_real_binary() {
    let mut stack = Stack::start();
    let admin = stack.admin.clone();
    assert_eq!(get(&format!("{admin}/healthz")), (200, "ok".to_owned()));
    let (status, body) = get(&format!("{admin}/readyz"));
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"ready\":true"), "{body}");
    let payload = format!(r#"{{"order_id": 1, "amount": 1250, "note": "{PAYLOAD_MARKER}"}}"#);
    enqueue_is_delivered_then_replayed(&stack, &payload);
    metrics_and_logs_describe_the_delivery(&stack);

    assert!(stack.daemon.stop("TERM"), "the daemon exits 0 on SIGTERM");
    let drained = |l: &str| l.contains("/readyz now answers 503");
    stack.daemon.stderr.wait_for("the drain", drained);
    assert!(
        stack.provider.stop("INT"),
        "the fake provider exits 0 on SIGINT"
    );
    let stopped = |l: &str| l.starts_with("fake provider stopped");
    stack.provider.stdout.wait_for("the goodbye", stopped);
    let everything = [&stack.daemon, &stack.provider]
        .iter()
        .map(|p| format!("{}\n{}", p.stdout.all(), p.stderr.all()))
        .collect::<String>();
    assert!(
        !everything.contains("qs-secret-never-printed"),
        "a secret was printed:\n{everything}"
    );
    assert!(
        !everything.contains(PAYLOAD_MARKER),
        "a payload was printed:\n{everything}"
    );
}
