//! `outboxd status` (counts by state, oldest due intent, reconciliation backlog; opens
//! the database read-only) and `outboxd migrate` (applies pending migrations, creating a
//! missing SQLite file), each as text or `--json`.
//!
//! `status --json`: `{"schema_version", "by_state": {STATE: n}, "oldest_due_at",
//! "reconciliation": {"open", "oldest_opened_at"}, "providers": [...]}` (each running
//! daemon's published provider state, as `GET /v1/providers`).
//! `migrate --json`: `{"database", "applied": [{"version", "name"}], "schema_version"}`.

use chrono::Utc;
use serde_json::{json, Map, Value};

use super::open::{open_for_command, OpenError};
use super::{print_json, CommandError};
use crate::config::Config;
use crate::store::connect::{connect, describe_location, ConnectError, OpenMode};
use crate::store::migrate::{MigrateError, MigrateOptions};
use crate::store::{Database, StatusSummary};

/// Prints the status summary of the configured database.
pub async fn status(config: &Config, json: bool) -> Result<(), CommandError> {
    let db = open_for_command(config, OpenMode::ReadOnly).await?;
    let now = Utc::now();
    let summary = db.operator_store().status_summary(now).await;
    // An older schema has no provider states: the counts are still worth showing.
    let providers = db.operator_store().list_provider_states().await;
    if let Err(e) = &providers {
        eprintln!("warning: provider states unavailable: {e}");
    }
    let version = db.schema_version().await;
    db.close().await;
    let summary = summary?;
    if json {
        let version = version.map_err(|source| OpenError::Query {
            location: describe_location(&config.database.url),
            source,
        })?;
        let mut value = status_json(&summary, version);
        value["providers"] = match &providers {
            Ok(rows) => crate::status::providers_json(rows, now),
            Err(_) => Value::Null,
        };
        return print_json(&value);
    }
    print!("{}", crate::status::render(&summary, now));
    match &providers {
        Ok(rows) => print!("{}", crate::status::render_providers(rows, now)),
        Err(_) => println!("providers: unavailable (see the warning above)"),
    }
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
pub async fn migrate(
    config: &Config,
    options: MigrateOptions,
    json: bool,
) -> Result<(), MigrateFailed> {
    let location = describe_location(&config.database.url);
    if !json {
        eprintln!("migrating {location} ...");
    }
    let db = connect(&config.database.url, 2).await?;
    let report = db.migrate_with(options).await;
    let creators = db.schema_creators().await;
    db.close().await;
    let report = report?;
    if let Some(warning) = Database::schema_creators_warning(&creators.map_err(MigrateError::from)?)
    {
        eprintln!("warning: {warning}");
    }
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
