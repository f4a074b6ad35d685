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
pub mod status;
mod table;

use chrono::{DateTime, Utc};
use serde::Serialize;

pub use args::{
    CheckArgs, IntentsCommand, ReconcileCommand, ResolveArgs, ResolveAs, ReviewCommand,
};
pub use report::ExitKind;

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
    /// No such reconciliation item.
    #[error("no reconciliation item {0}")]
    NoSuchItem(i64),
    /// No such intent.
    #[error("no intent {0}")]
    NoSuchIntent(i64),
    /// Someone (or the probe) resolved the item first; nothing changed.
    #[error("reconciliation item {item_id} was already resolved as {resolution} by {resolved_by} at {resolved_at}; nothing changed")]
    AlreadyResolved {
        /// The item.
        item_id: i64,
        /// Their resolution.
        resolution: String,
        /// Who.
        resolved_by: String,
        /// When.
        resolved_at: DateTime<Utc>,
    },
    /// The intent is not in a state the change applies to; nothing changed.
    #[error("intent {intent_id} is {state}: {what}; nothing changed")]
    WrongState {
        /// The intent.
        intent_id: i64,
        /// Its state.
        state: String,
        /// What was expected.
        what: &'static str,
    },
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
    /// The exit code class of this failure.
    pub fn exit_kind(&self) -> ExitKind {
        match self {
            CommandError::Open(_) => ExitKind::Database,
            CommandError::Store(_) | CommandError::Job(_) | CommandError::Json(_) => {
                ExitKind::Failure
            }
            CommandError::NoSuchItem(_) | CommandError::NoSuchIntent(_) => ExitKind::NotFound,
            CommandError::AlreadyResolved { .. }
            | CommandError::WrongState { .. }
            | CommandError::JobBusy => ExitKind::Conflict,
            CommandError::Usage(_) => ExitKind::Usage,
        }
    }

    /// A store refusal about intent `intent_id` (and item `item_id`, if any) in CLI terms.
    fn from_review(e: ReviewError, intent_id: Option<i64>, item_id: Option<i64>) -> Self {
        match e {
            ReviewError::NotFound => match item_id {
                Some(id) => CommandError::NoSuchItem(id),
                None => CommandError::NoSuchIntent(intent_id.unwrap_or_default()),
            },
            ReviewError::AlreadyResolved {
                resolution,
                resolved_by,
                resolved_at,
            } => CommandError::AlreadyResolved {
                item_id: item_id.unwrap_or_default(),
                resolution,
                resolved_by,
                resolved_at,
            },
            ReviewError::WrongState { state, what } => CommandError::WrongState {
                intent_id: intent_id.unwrap_or_default(),
                state,
                what,
            },
            ReviewError::Invalid(why) if why.field == crate::store::CONFIRM_FIELD => {
                CommandError::Usage(format!(
                    "{} (pass --confirm-may-act-twice to redispatch it anyway)",
                    why.reason
                ))
            }
            ReviewError::Invalid(why) => CommandError::Usage(why.reason),
            ReviewError::Store(e) => CommandError::Store(e),
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
