//! `outboxd audit` and `outboxd prune`.

use chrono::Utc;

use super::render::audit_table;
use super::table::time;
use super::{print_json, CommandError, SCOPE};
use crate::config::{format_duration, Config};
use crate::reconcile::{retention_preview, run_retention_job, JobRun, RetentionSettings};
use crate::store::Database;

/// Prints the newest audit entries.
pub(super) async fn audit(db: &Database, limit: u32, json: bool) -> Result<(), CommandError> {
    let entries = db
        .operator_store()
        .list_audit(&SCOPE, None, limit.max(1))
        .await?;
    if json {
        return print_json(&entries);
    }
    if entries.is_empty() {
        println!("the audit log is empty");
    } else {
        print!("{}", audit_table(&entries));
    }
    Ok(())
}

/// Runs the retention job once (under its lock), or with `dry_run` counts what it would do.
pub(super) async fn prune(
    db: &Database,
    config: &Config,
    dry_run: bool,
    json: bool,
) -> Result<(), CommandError> {
    let settings = RetentionSettings::from_config(&config.retention);
    let windows = format!(
        "finished_after = {}, tombstone_after = {}",
        format_duration(settings.finished_after),
        format_duration(settings.tombstone_after)
    );
    if dry_run {
        let (finished_before, tombstones_before) = settings.cutoffs(Utc::now());
        let preview = retention_preview(db, finished_before, tombstones_before)
            .await
            .map_err(|e| CommandError::Store(e.into()))?;
        if json {
            return print_json(&preview);
        }
        println!(
            "dry run ({windows}): would prune {} finished intent(s) that finished before {}, \
             keeping a tombstone for each, and delete {} tombstone(s) of intents that finished \
             before {}; nothing was changed",
            preview.prunable_intents,
            time(finished_before),
            preview.expirable_tombstones,
            time(tombstones_before)
        );
        return Ok(());
    }
    let report = match run_retention_job(db, &settings).await? {
        JobRun::Ran(report) => report,
        JobRun::Skipped => return Err(CommandError::JobBusy),
    };
    if json {
        return print_json(&report);
    }
    println!(
        "pruned {} finished intent(s) that finished before {} in {} batch(es), keeping a \
         tombstone for each; deleted {} tombstone(s) of intents that finished before {} \
         ({windows})",
        report.intents_pruned,
        time(report.finished_before),
        report.batches,
        report.tombstones_pruned,
        time(report.tombstones_before)
    );
    if !report.vacuumed.is_empty() {
        let tables: Vec<&str> = report.vacuumed.iter().map(|t| t.table()).collect();
        println!("vacuumed {} (retention.vacuum)", tables.join(", "));
    }
    Ok(())
}
