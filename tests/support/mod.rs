//! Shared test support: a fresh real database per test (a SQLite file in a temp dir, or a
//! PostgreSQL schema of its own), dropped when the test ends, and a macro that runs one
//! test body on both backends.
#![allow(dead_code)]

pub mod admin;
pub mod cli;
pub mod daemon;
pub mod db;
pub mod harness;
pub mod invariants;
pub mod kept_plans;
pub mod openapi;
pub mod pg_cluster;
pub mod webdriver;

pub use db::TestDb;

/// Tells the person running the suite that (part of) a test was skipped, on the terminal:
/// written to the process's stderr directly, because libtest captures `eprintln!` and
/// discards the capture of a passing test.
pub fn announce_skip(message: &str) {
    use std::io::Write as _;
    let line = "!".repeat(78);
    let _ = writeln!(std::io::stderr().lock(), "\n{line}\n!!! {message}\n{line}");
    record_skip(message);
}

/// Appends a skip to the file `OUTBOXD_SKIP_LOG` names (set by `scripts/test.sh`, which
/// prints the file at the end: a test runner that captures a passing test's stderr, as
/// cargo-nextest does, would otherwise hide the skip).
pub fn record_skip(message: &str) {
    use std::io::Write as _;
    let Some(path) = std::env::var_os("OUTBOXD_SKIP_LOG") else {
        return;
    };
    let test = std::thread::current().name().unwrap_or("a test").to_owned();
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(file, "{test}: {message}");
    }
}

/// Runs each named `async fn name(db: &TestDb)` on SQLite and on PostgreSQL.
#[macro_export]
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod on_sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let db = $crate::support::TestDb::sqlite().await;
                    super::$name(&db).await;
                }
            )*
        }
        mod on_postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(db) = $crate::support::TestDb::postgres().await else { return };
                    super::$name(&db).await;
                }
            )*
        }
    };
}
