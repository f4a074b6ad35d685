//! The command line: what each `outboxd` subcommand takes. Parsing only; `main.rs` runs
//! the chosen command.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// outboxd — a transactional outbox dispatcher.
#[derive(Debug, Parser)]
#[command(name = "outboxd", version, about)]
pub struct Cli {
    /// Configuration file (TOML). Without it: built-in defaults and OUTBOXD__* variables.
    #[arg(long, short, global = true, env = "OUTBOXD_CONFIG")]
    pub config: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon: dispatch intents, serve the admin API, run scheduled jobs.
    Run {
        /// Do not apply migrations at start (a separate `outboxd migrate` job does it).
        #[arg(long)]
        skip_migrations: bool,
    },
    /// Apply pending schema migrations and exit.
    Migrate,
    /// Print intent counts by state, the oldest due intent and the reconciliation backlog.
    Status,
    /// Operator commands on the database: `reconcile`, `intents`, `audit`, `prune`.
    #[command(flatten)]
    Review(crate::commands::ReviewCommand),
    /// Configuration tools.
    Config {
        /// What to do with the configuration.
        #[command(subcommand)]
        command: ConfigCommand,
    },
}

/// `outboxd config ...`.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate the configuration and print it with secrets redacted; non-zero on error.
    Check,
}
