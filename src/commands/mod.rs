//! The operator commands of the `outboxd` binary that are more than argument parsing:
//! [`enqueue`] (one intent in its own transaction), [`fake_provider`] (the built-in fake
//! provider standalone), and the commands that work on the database directly, without the
//! admin server: `reconcile list | show | resolve`, `intents list | show | cancel`, `audit`
//! and `prune`. They see every tenant ([`TenantScope::All`]): whoever can
//! run them can read the configuration and so the database anyway.
//!
//! * [`args`] — the clap definitions ([`ReviewCommand`]).
//! * [`open`] — opening the database without creating it, read-only when only reading.
//! * [`status`] (`status`, `migrate`), [`config_check`] (`config check`), `reconcile`,
//!   `intents`, `maintenance` — one file per command group.
//! * [`report`] — exit codes, the error chain printed once, the `--json` error shape.
//! * [`review_failed`] — a store refusal about one item or intent, in CLI words.
//! * `render`, `table` — aligned text for people; `--json` prints the store's values.
//!
//! Every change goes through [`crate::store::ReviewStore`], so it is atomic and audited
//! exactly as through the admin API.

pub mod args;
pub mod config_check;
pub mod enqueue;
pub mod fake_provider;
mod intents;
mod maintenance;
pub mod open;
mod reconcile;
mod render;
pub mod report;
pub mod review_failed;
pub mod status;
mod table;

use serde::Serialize;

pub use args::{
    CheckArgs, IntentsCommand, ReconcileCommand, ResolveArgs, ResolveAs, ReviewCommand,
};
pub use report::ExitKind;
pub use review_failed::{ReviewFailed, Subject};

use crate::config::Config;
use crate::store::connect::OpenMode;
use crate::store::{ReviewError, StoreError, TenantScope};

/// Why an operator command failed; `main` prints it and exits non-zero.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The database could not be opened or is not migrated.
    #[error(transparent)]
    Open(#[from] open::OpenError),
    /// A query failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The store refused a change (or found nothing) about one item or intent, or the
    /// database failed; the message names the item or intent.
    #[error(transparent)]
    Review(#[from] ReviewFailed),
    /// The arguments do not make a valid request; nothing changed.
    #[error("{0}")]
    Usage(String),
    /// The retention job could not run.
    #[error(transparent)]
    Job(#[from] crate::reconcile::JobError),
    /// Another process is running the retention job right now.
    #[error("another outboxd is running the retention job right now; nothing was done here, try again later")]
    JobBusy,
    /// Output could not be encoded.
    #[error("cannot encode JSON output: {0}")]
    Json(#[from] serde_json::Error),
}

impl CommandError {
    /// The store's `error` about `subject`.
    pub fn review(subject: Subject, error: ReviewError) -> Self {
        CommandError::Review(ReviewFailed { subject, error })
    }

    /// Nothing is `subject` (exit code 5).
    pub fn not_found(subject: Subject) -> Self {
        Self::review(subject, ReviewError::NotFound)
    }

    /// The exit code class of this failure.
    pub fn exit_kind(&self) -> ExitKind {
        match self {
            CommandError::Open(_) => ExitKind::Database,
            CommandError::Store(_) | CommandError::Job(_) | CommandError::Json(_) => {
                ExitKind::Failure
            }
            CommandError::Review(e) => e.exit_kind(),
            CommandError::JobBusy => ExitKind::Conflict,
            CommandError::Usage(_) => ExitKind::Usage,
        }
    }
}

/// The scope of every CLI read and write.
const SCOPE: TenantScope = TenantScope::All;

/// Runs one operator command against the database named in `config`, printing JSON
/// instead of text with `json`.
pub async fn run(config: &Config, command: &ReviewCommand, json: bool) -> Result<(), CommandError> {
    let mode = if command.writes() {
        OpenMode::Existing
    } else {
        OpenMode::ReadOnly
    };
    let db = open::open_for_command(config, mode).await?;
    let result = match command {
        ReviewCommand::Reconcile { command } => reconcile::run(&db, config, command, json).await,
        ReviewCommand::Intents { command } => intents::run(&db, command, json).await,
        ReviewCommand::Audit { limit } => maintenance::audit(&db, *limit, json).await,
        ReviewCommand::Prune { dry_run } => maintenance::prune(&db, config, *dry_run, json).await,
    };
    db.close().await;
    result
}

/// Prints `value` as pretty JSON on stdout.
fn print_json<T: Serialize + ?Sized>(value: &T) -> Result<(), CommandError> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}
