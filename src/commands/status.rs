//! `outboxd status` (counts by state, oldest due intent, reconciliation backlog; opens
//! the database read-only) and `outboxd migrate` (applies pending migrations, creating a
//! missing SQLite file), each as text or `--json`.
//!
//! `status --json`: `{"schema_version", "by_state": {STATE: n}, "oldest_due_at",
//! "reconciliation": {"open", "oldest_opened_at"}}`.
//! `migrate --json`: `{"database", "applied": [{"version", "name"}], "schema_version"}`.

use chrono::Utc;
use serde_json::{json, Map, Value};

use super::open::{open_for_command, OpenError};
use super::{print_json, CommandError};
use crate::config::Config;
use crate::store::connect::{connect, describe_location, ConnectError, OpenMode};
use crate::store::migrate::MigrateError;
use crate::store::StatusSummary;

/// Prints the status summary of the configured database.
pub async fn status(config: &Config, json: bool) -> Result<(), CommandError> {
    let db = open_for_command(config, OpenMode::ReadOnly).await?;
    let summary = db.store().status_summary(Utc::now()).await;
    let version = db.schema_version().await;
    db.close().await;
    let summary = summary?;
    if json {
        let version = version.map_err(|source| OpenError::Query {
            location: describe_location(&config.database.url),
            source,
        })?;
        return print_json(&status_json(&summary, version));
    }
    print!("{}", crate::status::render(&summary, Utc::now()));
    Ok(())
}

fn status_json(summary: &StatusSummary, version: i64) -> Value {
    let by_state: Map<String, Value> = summary
        .by_state
        .iter()
        .map(|(state, count)| (state.as_str().to_owned(), json!(count)))
        .collect();
    json!({
        "schema_version": version,
        "by_state": by_state,
        "oldest_due_at": summary.oldest_due_at,
        "reconciliation": {
            "open": summary.reconciliation_open,
            "oldest_opened_at": summary.reconciliation_oldest_at,
        },
    })
}

/// Why `outboxd migrate` failed.
#[derive(Debug, thiserror::Error)]
pub enum MigrateFailed {
    /// The database could not be opened.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// A migration failed, or the schema is beyond this build.
    #[error(transparent)]
    Migrate(#[from] MigrateError),
}

/// Applies pending migrations (creating a missing SQLite file), reporting progress on
/// stderr, or the result as JSON on stdout.
pub async fn migrate(config: &Config, json: bool) -> Result<(), MigrateFailed> {
    let location = describe_location(&config.database.url);
    if !json {
        eprintln!("migrating {location} ...");
    }
    let db = connect(&config.database.url, 2).await?;
    let report = db.migrate().await;
    db.close().await;
    let report = report?;
    if json {
        let applied: Vec<Value> = report
            .applied
            .iter()
            .map(|(version, name)| json!({"version": version, "name": name}))
            .collect();
        let out =
            json!({"database": location, "applied": applied, "schema_version": report.version});
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
        return Ok(());
    }
    for (version, name) in &report.applied {
        eprintln!("applied migration {version} ({name})");
    }
    eprintln!(
        "schema at version {} ({} applied now)",
        report.version,
        report.applied.len()
    );
    Ok(())
}
