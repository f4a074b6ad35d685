//! The daemon under test: a config file written from a few parts (the shipped defaults
//! unless a scenario overrides a setting) and `outboxd run` as a child process.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

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
}

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

    fn terminate(&mut self) {
        if std::mem::replace(&mut self.stopped, true) {
            return;
        }
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
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
    fn stop_then_drop_signals_once() {
        let dir = std::env::temp_dir().join(format!("obx-bench-stop-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let daemon = Daemon::start(&long_running_binary(&dir), "# config").unwrap();
        let pid = daemon.id();
        daemon.stop();
        assert!(!running(pid));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
