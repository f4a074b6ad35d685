//! The daemon under test: a config file written from a few parts (the shipped defaults
//! unless a scenario overrides a setting) and `outboxd run` as a child process.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::setup::ACTION;
use super::BenchError;

/// One provider with its one action.
#[derive(Debug, Clone)]
pub struct ProviderSpec {
    /// `[providers.NAME]`.
    pub name: String,
    /// `[actions.NAME]` delivered to it.
    pub action: String,
    /// Its base URL (a fake provider).
    pub base_url: String,
    /// Extra TOML lines for the provider table (`max_in_flight = 8`).
    pub extra: String,
}

impl ProviderSpec {
    /// The benchmark's usual provider: `bench`, action [`ACTION`].
    pub fn bench(base_url: String) -> Self {
        Self::named("bench", ACTION, base_url)
    }

    /// A provider `name` receiving `action`, with default settings.
    pub fn named(name: &str, action: &str, base_url: String) -> Self {
        Self {
            name: name.into(),
            action: action.into(),
            base_url,
            extra: String::new(),
        }
    }

    /// The same with extra provider settings.
    pub fn with(mut self, extra: &str) -> Self {
        self.extra = extra.into();
        self
    }
}

/// The config text: `dispatcher` holds extra `[dispatcher]` lines (empty: the defaults).
pub fn config(url: &str, dispatcher: &str, providers: &[ProviderSpec]) -> String {
    let mut text = format!(
        "[database]\nurl = \"{url}\"\n[dispatcher]\nowner = \"bench\"\n{dispatcher}\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n[logging]\nformat = \"json\"\nlevel = \"warn\"\n"
    );
    for p in providers {
        text.push_str(&format!(
            "[providers.{name}]\nbase_url = \"{base}\"\nallow_private_addresses = true\n{extra}\n\
             [actions.{action}]\nprovider = \"{name}\"\nmethod = \"POST\"\npath = \"/keyed/{name}\"\n\
             retry_safety = \"idempotent_with_key\"\nreference_pointer = \"/id\"\n",
            name = p.name,
            base = p.base_url,
            extra = p.extra,
            action = p.action,
        ));
    }
    text
}

/// A running `outboxd run`; stopped with SIGTERM by [`Daemon::stop`], or when dropped (a
/// measurement that fails half-way must not leave a daemon behind: it would keep claiming,
/// and waking on every later run's notifications, and skew what they measure).
pub struct Daemon {
    child: Child,
    path: PathBuf,
    stopped: bool,
    /// How long a SIGTERM gets before SIGKILL.
    stop_within: Duration,
}

/// Time a stopping daemon gets to drain (its default `shutdown_grace` is 20 s, and a claim
/// handed back while the database is unreachable retries until its lease runs out) before
/// it is killed.
pub const STOP_WITHIN: Duration = Duration::from_secs(60);

impl Daemon {
    /// Writes `config` to a file of its own and starts the daemon on it.
    pub fn start(binary: &std::path::Path, config: &str) -> Result<Daemon, BenchError> {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "outboxd-bench-{}-{}.toml",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&path, config)?;
        let child = Command::new(binary)
            .args(["run", "--config"])
            .arg(&path)
            .env_remove("OUTBOXD_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        Ok(Daemon {
            child,
            path,
            stopped: false,
            stop_within: STOP_WITHIN,
        })
    }

    /// The child's process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then waits for it to exit (it drains within its shutdown grace).
    pub fn stop(mut self) {
        self.terminate();
    }

    /// SIGTERM, a wait of up to `stop_within`, then SIGKILL (also when SIGTERM could not
    /// be sent): no measurement waits for ever on a daemon that does not stop.
    fn terminate(&mut self) {
        if std::mem::replace(&mut self.stopped, true) {
            return;
        }
        let signalled = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .is_ok_and(|s| s.success());
        let until = Instant::now() + self.stop_within;
        while signalled && Instant::now() < until {
            match self.child.try_wait() {
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                _ => break,
            }
        }
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            eprintln!(
                "outboxd-bench: daemon {} did not stop within {:?} of SIGTERM; killing it",
                self.child.id(),
                self.stop_within
            );
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.terminate();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A stand-in for `outboxd`: runs until it is signalled.
    fn long_running_binary(dir: &std::path::Path) -> PathBuf {
        let path = dir.join("fake-outboxd");
        std::fs::write(&path, "#!/bin/sh\nexec sleep 600\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    fn running(pid: u32) -> bool {
        // A reaped child has no /proc entry; an unreaped one would show state Z.
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false)
    }

    #[test]
    fn a_daemon_dropped_on_an_error_path_is_stopped_and_its_config_removed() {
        let dir = std::env::temp_dir().join(format!("obx-bench-daemon-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let binary = long_running_binary(&dir);
        let (pid, config) = {
            let daemon = Daemon::start(&binary, "# config").unwrap();
            assert!(running(daemon.id()), "the stand-in should be running");
            (daemon.id(), daemon.path.clone())
            // dropped here, as a `?` in a measurement drops it
        };
        assert!(
            !running(pid),
            "the daemon outlived the measurement that started it"
        );
        assert!(!config.exists(), "its config file was left behind");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_daemon_that_ignores_sigterm_is_killed_after_the_deadline() {
        let dir = std::env::temp_dir().join(format!("obx-bench-stubborn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("stubborn-outboxd");
        // An ignored signal stays ignored across exec: `sleep` ignores SIGTERM too.
        std::fs::write(&path, "#!/bin/sh\ntrap '' TERM\nexec sleep 600\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut daemon = Daemon::start(&path, "# config").unwrap();
        daemon.stop_within = Duration::from_millis(300);
        let pid = daemon.id();
        std::thread::sleep(Duration::from_millis(100)); // let the trap be set
        let (done, stopped) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            daemon.stop();
            let _ = done.send(());
        });
        assert!(
            stopped.recv_timeout(Duration::from_secs(10)).is_ok(),
            "stopping a daemon that ignores SIGTERM did not return"
        );
        assert!(!running(pid), "the stubborn daemon is still running");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
