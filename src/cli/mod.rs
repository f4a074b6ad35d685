//! The command line: what each `outboxd` subcommand takes. Parsing only; `main.rs` runs
//! the chosen command ([`crate::commands::report`] says how a failure is reported).
//!
//! * [`term`] — colour only on a terminal and never with `NO_COLOR`.

pub mod term;

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// outboxd — a transactional outbox dispatcher.
#[derive(Debug, Parser)]
#[command(name = "outboxd", version, about)]
pub struct Cli {
    /// Configuration file (TOML). Without it: built-in defaults and OUTBOXD__* variables.
    #[arg(long, short, global = true, env = "OUTBOXD_CONFIG")]
    pub config: Option<PathBuf>,
    /// Print the result (or the error) as JSON on stdout instead of text.
    #[arg(long, global = true)]
    pub json: bool,
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
    Migrate {
        /// PostgreSQL: migrate although roles other than the migrating role may create
        /// objects in the schema (a function one of them creates during
        /// the run could run with the migrating role's rights). Without it, the run refuses
        /// and names the roles.
        #[arg(long)]
        allow_schema_creators: bool,
    },
    /// Print intent counts by state, the oldest due intent, the reconciliation backlog and
    /// each running daemon's provider state (in flight, breaker, pause).
    Status,
    /// Record one intent in a transaction of its own and print the receipt as JSON.
    Enqueue(EnqueueCli),
    /// Tell the story of a lost response, a conflict and an unknown outcome on a temporary
    /// SQLite database and the built-in fake provider (no configuration needed).
    Demo,
    /// Run the built-in fake provider on 127.0.0.1 until Ctrl-C (for trials).
    FakeProvider {
        /// Address to listen on (127.0.0.1 only; port 0 picks a free one).
        #[arg(long, default_value = "127.0.0.1:9090")]
        listen: SocketAddr,
        /// Request header carrying the idempotency key.
        #[arg(long, default_value = "Idempotency-Key")]
        idempotency_header: String,
    },
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
    Check(crate::commands::CheckArgs),
}

/// `outboxd enqueue ...`.
#[derive(Debug, clap::Args)]
pub struct EnqueueCli {
    /// The tenant the operation belongs to.
    #[arg(long)]
    pub tenant: String,
    /// Your identifier of this logical operation; reuse it to retry.
    #[arg(long)]
    pub operation_id: String,
    /// The configured action (e.g. issue_refund).
    #[arg(long)]
    pub action: String,
    /// The arguments: a JSON object.
    #[arg(long)]
    pub payload: String,
    /// Version of the payload's schema.
    #[arg(long, default_value_t = 1)]
    pub payload_version: i32,
    /// Downstream idempotency key (default: derived from tenant, operation id and action).
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// Intents sharing an ordering key are attempted in enqueue order.
    #[arg(long)]
    pub ordering_key: Option<String>,
}

impl EnqueueCli {
    /// The arguments as the enqueue command takes them.
    pub fn to_args(&self) -> crate::commands::enqueue::EnqueueArgs {
        crate::commands::enqueue::EnqueueArgs {
            tenant: self.tenant.clone(),
            operation_id: self.operation_id.clone(),
            action: self.action.clone(),
            payload: self.payload.clone(),
            payload_version: self.payload_version,
            idempotency_key: self.idempotency_key.clone(),
            ordering_key: self.ordering_key.clone(),
        }
    }
}
