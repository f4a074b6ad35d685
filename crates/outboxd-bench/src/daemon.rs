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

/// A running `outboxd run`; stopped with SIGTERM by [`Daemon::stop`].
pub struct Daemon {
    child: Child,
    path: PathBuf,
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
        Ok(Daemon { child, path })
    }

    /// The child's process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then waits for it to exit (it drains within its shutdown grace).
    pub fn stop(mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.path);
    }
}
