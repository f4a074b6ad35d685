//! `outboxd intents list | show | cancel`.

use chrono::Utc;

use super::args::{actor_or_default, IntentsCommand};
use super::render::{attempts_table, intent_block, intents_table, items_table};
use super::{print_json, CommandError, Subject, SCOPE};
use crate::intent::{IntentId, IntentState};
use crate::store::{Cancellation, Database, IntentDetail, IntentFilter};

/// Runs one `intents` subcommand.
pub(super) async fn run(
    db: &Database,
    command: &IntentsCommand,
    json: bool,
) -> Result<(), CommandError> {
    match command {
        IntentsCommand::List {
            tenant,
            state,
            action,
            after,
            limit,
        } => {
            let filter = IntentFilter {
                tenants: tenant.clone().map(|t| vec![t]),
                state: *state,
                action: action.clone(),
                created_before: None,
                after_id: *after,
                limit: (*limit).max(1),
            };
            list(db, &filter, json).await
        }
        IntentsCommand::Show { id } => show(db, *id, json).await,
        IntentsCommand::Cancel { id, note, actor } => {
            cancel(db, *id, note, actor.as_deref(), json).await
        }
    }
}

async fn list(db: &Database, filter: &IntentFilter, json: bool) -> Result<(), CommandError> {
    let intents = db.operator_store().list_intents(filter).await?;
    if json {
        return print_json(&intents);
    }
    if intents.is_empty() {
        println!("no intents match");
        return Ok(());
    }
    print!("{}", intents_table(&intents, Utc::now()));
    if intents.len() as u32 >= filter.limit {
        let last = intents.last().map(|i| i.id).unwrap_or_default();
        println!(
            "(first {} shown; --after {last} for the next page)",
            intents.len()
        );
    }
    Ok(())
}

async fn show(db: &Database, id: IntentId, json: bool) -> Result<(), CommandError> {
    let store = db.operator_store();
    let intent = store
        .get_intent(id)
        .await?
        .ok_or_else(|| CommandError::not_found(Subject::Intent(id)))?;
    let detail = IntentDetail {
        attempts: store.list_attempts(id).await?,
        reconciliation: store.reconciliation_for_intent(id).await?,
        intent,
    };
    if json {
        return print_json(&detail);
    }
    let now = Utc::now();
    print!("{}", intent_block(&detail.intent, now));
    println!();
    print!("{}", attempts_table(&detail.attempts));
    if !detail.reconciliation.is_empty() {
        println!();
        println!("reconciliation items");
        print!(
            "{}",
            super::render::indent(&items_table(&detail.reconciliation, now))
        );
    }
    if detail.intent.state == IntentState::Unknown {
        println!();
        println!("outcome unknown: see `outboxd reconcile show ID` for the open item");
    }
    Ok(())
}

async fn cancel(
    db: &Database,
    id: IntentId,
    note: &str,
    actor: Option<&str>,
    json: bool,
) -> Result<(), CommandError> {
    if note.trim().is_empty() {
        return Err(CommandError::Usage(
            "--note must say why (it is recorded in the audit log); nothing changed".into(),
        ));
    }
    let cancellation = Cancellation {
        intent_id: id,
        scope: SCOPE,
        actor: actor_or_default(actor),
        note: note.trim().to_owned(),
        now: Utc::now(),
        seen_attempt_count: None,
    };
    let intent = db
        .operator_store()
        .cancel_intent(&cancellation)
        .await
        .map_err(|e| CommandError::review(Subject::Intent(id), e))?;
    if json {
        return print_json(&intent);
    }
    println!(
        "cancelled intent {} ({} / {}), by {}",
        intent.id, intent.tenant, intent.operation_id, cancellation.actor
    );
    Ok(())
}
