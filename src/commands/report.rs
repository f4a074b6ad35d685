//! How a failed command reports itself: the documented exit codes ([`ExitKind`]), the
//! error chain printed once ([`one_chain`]), and the JSON error shape of `--json`
//! ([`error_json`]). `docs/cli.md` has the table; keep it in step with [`ExitKind`].

use std::error::Error;

use serde_json::{json, Value};

use super::config_check::CheckFailed;
use super::enqueue::EnqueueCommandError;
use super::open::OpenError;
use super::status::MigrateFailed;
use super::CommandError;
use crate::config::ConfigError;
use crate::daemon::DaemonError;
use crate::store::connect::ConnectError;
use crate::store::migrate::MigrateError;
use crate::EnqueueError;

/// The class of a failure, and the exit code that says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitKind {
    /// 1: anything else (a query failed, the retention job failed, ...).
    Failure,
    /// 2: the command line or its arguments are wrong (clap uses 2 as well).
    Usage,
    /// 3: the configuration is invalid (or, with `--strict`, has warnings).
    Config,
    /// 4: the database cannot be reached, the SQLite file is missing, or the schema is
    /// missing, behind or too new.
    Database,
    /// 5: the intent or reconciliation item does not exist.
    NotFound,
    /// 6: the change conflicts with the current state (already resolved, not pending, a
    /// different payload under the same operation id, the job running elsewhere).
    Conflict,
}

impl ExitKind {
    /// Every kind, in code order.
    pub const ALL: [ExitKind; 6] = [
        ExitKind::Failure,
        ExitKind::Usage,
        ExitKind::Config,
        ExitKind::Database,
        ExitKind::NotFound,
        ExitKind::Conflict,
    ];

    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            ExitKind::Failure => 1,
            ExitKind::Usage => 2,
            ExitKind::Config => 3,
            ExitKind::Database => 4,
            ExitKind::NotFound => 5,
            ExitKind::Conflict => 6,
        }
    }

    /// The stable name used in `--json` error output.
    pub fn name(self) -> &'static str {
        match self {
            ExitKind::Failure => "failure",
            ExitKind::Usage => "usage",
            ExitKind::Config => "config",
            ExitKind::Database => "database",
            ExitKind::NotFound => "not_found",
            ExitKind::Conflict => "conflict",
        }
    }

    /// The kind of the outermost error in `chain` that has one; [`ExitKind::Failure`]
    /// when none does.
    pub fn of_chain<'a>(chain: impl IntoIterator<Item = &'a (dyn Error + 'static)>) -> Self {
        chain
            .into_iter()
            .find_map(Self::of)
            .unwrap_or(ExitKind::Failure)
    }

    /// The kind of one error, if it is one outboxd knows.
    fn of(e: &(dyn Error + 'static)) -> Option<Self> {
        if let Some(e) = e.downcast_ref::<CommandError>() {
            return Some(e.exit_kind());
        }
        if let Some(e) = e.downcast_ref::<EnqueueCommandError>() {
            return Some(e.exit_kind());
        }
        if e.is::<ConfigError>() || e.is::<CheckFailed>() {
            return Some(ExitKind::Config);
        }
        if e.is::<OpenError>()
            || e.is::<ConnectError>()
            || e.is::<MigrateError>()
            || e.is::<MigrateFailed>()
        {
            return Some(ExitKind::Database);
        }
        match e.downcast_ref::<DaemonError>()? {
            DaemonError::Connect(_)
            | DaemonError::Migrate(_)
            | DaemonError::Schema(_)
            | DaemonError::Database(_) => Some(ExitKind::Database),
            DaemonError::Build(_) => Some(ExitKind::Config),
            DaemonError::Listen { .. } | DaemonError::Jobs(_) => None,
        }
    }
}

/// Joins an error chain with `": "`, leaving out a cause whose text its parent already
/// shows (an error that prints its source and also returns it from `source()`), so no
/// cause is printed twice.
pub fn one_chain(messages: impl IntoIterator<Item = String>) -> String {
    let mut out = String::new();
    for message in messages {
        if message.is_empty() || out.contains(&message) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&message);
    }
    out
}

/// The `--json` error object printed on stdout when a command fails:
/// `{"error": {"kind", "exit_code", "message"}}`.
pub fn error_json(kind: ExitKind, message: &str) -> Value {
    json!({"error": {"kind": kind.name(), "exit_code": kind.code(), "message": message}})
}

/// The exit code class of an `outboxd enqueue` failure.
impl EnqueueCommandError {
    /// The exit code class of this failure.
    pub fn exit_kind(&self) -> ExitKind {
        match self {
            EnqueueCommandError::PayloadNotJson(_) => ExitKind::Usage,
            EnqueueCommandError::Open(_) => ExitKind::Database,
            EnqueueCommandError::Enqueue(EnqueueError::Conflict { .. }) => ExitKind::Conflict,
            EnqueueCommandError::Enqueue(EnqueueError::Invalid(_)) => ExitKind::Usage,
            EnqueueCommandError::Enqueue(_) => ExitKind::Failure,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_already_shown_is_left_out() {
        let chain = [
            "cannot open database sqlite://x: unable to open database file".to_owned(),
            "unable to open database file".to_owned(),
        ];
        assert_eq!(
            one_chain(chain),
            "cannot open database sqlite://x: unable to open database file"
        );
        let chain = ["outboxd run".to_owned(), "no such table".to_owned()];
        assert_eq!(one_chain(chain), "outboxd run: no such table");
    }

    #[test]
    fn exit_codes_are_distinct_and_documented() {
        let docs = include_str!("../../docs/cli.md");
        let mut codes: Vec<u8> = ExitKind::ALL.iter().map(|k| k.code()).collect();
        codes.dedup();
        assert_eq!(codes.len(), ExitKind::ALL.len());
        for kind in ExitKind::ALL {
            let row = format!("| {} | `{}` |", kind.code(), kind.name());
            assert!(docs.contains(&row), "docs/cli.md lacks the row {row:?}");
        }
    }
}
