//! The operator subcommands' arguments (clap): `outboxd reconcile ...`, `outboxd intents
//! ...`, `outboxd audit` and `outboxd prune`. Parsing only; [`super::run`] executes them.

use clap::{Args, Subcommand, ValueEnum};

use crate::intent::{IntentId, IntentState};
use crate::store::ReconciliationItemId;

/// Operator commands that work on the database directly (every tenant; no admin server).
#[derive(Debug, Subcommand)]
pub enum ReviewCommand {
    /// The reconciliation queue: intents whose outcome is unknown.
    Reconcile {
        /// What to do.
        #[command(subcommand)]
        command: ReconcileCommand,
    },
    /// Look at intents, or cancel a pending one.
    Intents {
        /// What to do.
        #[command(subcommand)]
        command: IntentsCommand,
    },
    /// The audit log of every change made by people, probes and producers, newest first.
    Audit {
        /// At most this many entries.
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// Run the retention job once: prune old finished intents (keeping tombstones) and
    /// expire old tombstones, as configured in [retention].
    Prune {
        /// Only count what would be pruned; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

impl ReviewCommand {
    /// Whether the command changes the database (it is opened read-only otherwise).
    pub fn writes(&self) -> bool {
        match self {
            ReviewCommand::Reconcile { command } => {
                matches!(command, ReconcileCommand::Resolve(_))
            }
            ReviewCommand::Intents { command } => matches!(command, IntentsCommand::Cancel { .. }),
            ReviewCommand::Audit { .. } => false,
            ReviewCommand::Prune { dry_run, .. } => !dry_run,
        }
    }
}

/// `outboxd config check`.
#[derive(Debug, Clone, Copy, Default, Args)]
pub struct CheckArgs {
    /// Treat warnings as errors.
    #[arg(long)]
    pub strict: bool,
    /// Validate without reading secrets: `*_env` variables need not be set and `*_file`
    /// files need not exist (each secret must still be given exactly one way).
    #[arg(long)]
    pub no_secrets: bool,
}

/// `outboxd reconcile ...`.
#[derive(Debug, Subcommand)]
pub enum ReconcileCommand {
    /// Open items, oldest first.
    List {
        /// Only this tenant.
        #[arg(long)]
        tenant: Option<String>,
        /// Only this action.
        #[arg(long)]
        action: Option<String>,
        /// Only item ids greater than this (paging).
        #[arg(long)]
        after: Option<ReconciliationItemId>,
        /// At most this many items.
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// One item with its intent and full attempt history.
    Show {
        /// The reconciliation item id.
        id: ReconciliationItemId,
    },
    /// Resolve an item: delivered (with the provider's reference), redispatch (send again
    /// with the same idempotency key) or abandoned.
    Resolve(ResolveArgs),
}

/// How to resolve an unknown outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ResolveAs {
    /// It happened; `--ref` gives the provider's reference.
    Delivered,
    /// Send it again with the same idempotency key (a new retry budget starts).
    Redispatch,
    /// Do not pursue it; terminal.
    Abandoned,
}

/// `outboxd reconcile resolve`.
#[derive(Debug, Args)]
pub struct ResolveArgs {
    /// The reconciliation item id.
    pub id: ReconciliationItemId,
    /// The resolution.
    #[arg(long = "as", value_enum)]
    pub resolution: ResolveAs,
    /// The provider's reference (required with `--as delivered`).
    #[arg(long = "ref")]
    pub provider_ref: Option<String>,
    /// Why (required; recorded in the audit log).
    #[arg(long)]
    pub note: String,
    /// Who is resolving it (default `cli:$USER`).
    #[arg(long)]
    pub actor: Option<String>,
    /// Confirms a redispatch that may make the provider act twice (a `not_idempotent`
    /// action after an ambiguous attempt, a key the provider may have forgotten, or an
    /// action not in the configuration); without it such a redispatch is refused.
    #[arg(long)]
    pub confirm_may_act_twice: bool,
}

/// `outboxd intents ...`.
#[derive(Debug, Subcommand)]
pub enum IntentsCommand {
    /// Intents by id, oldest first.
    List {
        /// Only this tenant.
        #[arg(long)]
        tenant: Option<String>,
        /// Only this state (pending, in_flight, delivered, failed, unknown, cancelled,
        /// abandoned).
        #[arg(long, value_parser = parse_state)]
        state: Option<IntentState>,
        /// Only this action.
        #[arg(long)]
        action: Option<String>,
        /// Only ids greater than this (paging).
        #[arg(long)]
        after: Option<IntentId>,
        /// At most this many intents.
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// One intent with its attempts and reconciliation items.
    Show {
        /// The intent id.
        id: IntentId,
    },
    /// Cancel a pending intent (terminal `cancelled`).
    Cancel {
        /// The intent id.
        id: IntentId,
        /// Why (required; recorded in the audit log).
        #[arg(long)]
        note: String,
        /// Who is cancelling it (default `cli:$USER`).
        #[arg(long)]
        actor: Option<String>,
    },
}

fn parse_state(value: &str) -> Result<IntentState, String> {
    IntentState::parse(value).ok_or_else(|| {
        let names: Vec<&str> = IntentState::ALL.iter().map(|s| s.as_str()).collect();
        format!("expected one of {}", names.join(", "))
    })
}

/// The actor recorded for a CLI change: `--actor`, else `cli:$USER`.
pub fn actor_or_default(actor: Option<&str>) -> String {
    match actor.map(str::trim).filter(|a| !a.is_empty()) {
        Some(actor) => actor.to_owned(),
        None => {
            let user = std::env::var("USER")
                .ok()
                .filter(|u| !u.is_empty())
                .unwrap_or_else(|| "unknown".to_owned());
            format!("cli:{user}")
        }
    }
}
