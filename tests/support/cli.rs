//! Running the real `outboxd` binary's operator commands against a test database: a
//! minimal config file naming the database, and helpers that expect success or failure.

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

use super::TestDb;

/// A config file naming the test database, in a temp dir kept alive with it.
pub struct Cli {
    config: PathBuf,
    _dir: tempfile::TempDir,
}

impl Cli {
    /// A config for `t` (default retention windows: 7 days, tombstones 400 days).
    pub fn new(t: &TestDb) -> Cli {
        Self::for_url(&t.url, "")
    }

    /// A config naming the database at `url`, followed by `extra` TOML.
    pub fn for_url(url: &str, extra: &str) -> Cli {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("outboxd.toml");
        let text = format!(
            "[database]\nurl = \"{url}\"\nmax_connections = 2\n\n[logging]\nlevel = \"warn\"\n\n\
             [retention]\nfinished_after = \"7d\"\ntombstone_after = \"400d\"\n{extra}"
        );
        std::fs::write(&config, text).expect("write config");
        Cli { config, _dir: dir }
    }

    /// Runs `outboxd --config <file> <args>` as user `tester`.
    pub async fn run(&self, args: &[&str]) -> Output {
        self.run_env(args, &[]).await
    }

    /// Like [`Cli::run`], with `env` added to the environment (`NO_COLOR` and
    /// `CLICOLOR_FORCE` are removed unless given).
    pub async fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut command = Command::new(env!("CARGO_BIN_EXE_outboxd"));
        command
            .arg("--config")
            .arg(&self.config)
            .args(args)
            .env_remove("OUTBOXD_CONFIG")
            .env_remove("NO_COLOR")
            .env_remove("CLICOLOR_FORCE")
            .env("USER", "tester")
            .envs(env.iter().copied());
        tokio::task::spawn_blocking(move || command.output().expect("run outboxd"))
            .await
            .expect("join")
    }

    /// Runs and expects exit code `code`; returns (stdout, stderr).
    pub async fn exits(&self, args: &[&str], code: i32) -> (String, String) {
        let out = self.run(args).await;
        let (stdout, stderr) = texts(&out);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{args:?}: expected exit {code}; stderr: {stderr}\nstdout: {stdout}"
        );
        (stdout, stderr)
    }

    /// Runs and expects exit 0; returns stdout.
    pub async fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        let (stdout, stderr) = texts(&out);
        assert!(out.status.success(), "{args:?} failed: {stderr}\n{stdout}");
        stdout
    }

    /// Runs and expects a non-zero exit; returns stderr.
    pub async fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        let (stdout, stderr) = texts(&out);
        assert!(!out.status.success(), "{args:?} succeeded: {stdout}");
        stderr
    }

    /// Runs and expects success with JSON on stdout.
    pub async fn json(&self, args: &[&str]) -> Value {
        let stdout = self.ok(args).await;
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {stdout}"))
    }
}

/// stdout and stderr of `out` as text.
pub fn texts(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
