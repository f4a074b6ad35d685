//! `outboxd reconcile list | show | resolve`: the reconciliation queue from a terminal.

use std::sync::Arc;

use chrono::Utc;
use serde::Serialize;

use super::args::{actor_or_default, ReconcileCommand, ResolveArgs, ResolveAs};
use super::render::{attempts_table, intent_block, item_block, items_table};
use super::{print_json, CommandError, Subject, SCOPE};
use crate::config::{resend_policies, Config};
use crate::store::{
    AttemptRow, Database, IntentRow, ReconciliationFilter, ReconciliationItem,
    ReconciliationItemId, ResendApproval, Resolution, ResolutionKind, TenantScope,
};

/// Runs one `reconcile` subcommand.
pub(super) async fn run(
    db: &Database,
    config: &Config,
    command: &ReconcileCommand,
    json: bool,
) -> Result<(), CommandError> {
    match command {
        ReconcileCommand::List {
            tenant,
            action,
            after,
            limit,
        } => {
            let mut filter = ReconciliationFilter::open(SCOPE, (*limit).max(1));
            if let Some(tenant) = tenant {
                filter.scope = TenantScope::Only(vec![tenant.clone()]);
            }
            filter.action = action.clone();
            filter.after_id = *after;
            list(db, &filter, json).await
        }
        ReconcileCommand::Show { id } => show(db, *id, json).await,
        ReconcileCommand::Resolve(args) => resolve(db, config, args, json).await,
    }
}

async fn list(
    db: &Database,
    filter: &ReconciliationFilter,
    json: bool,
) -> Result<(), CommandError> {
    let items = db.operator_store().list_reconciliation(filter).await?;
    if json {
        return print_json(&items);
    }
    if items.is_empty() {
        println!("the reconciliation queue is empty");
        return Ok(());
    }
    print!("{}", items_table(&items, Utc::now()));
    if items.len() as u32 >= filter.limit {
        let last = items.last().map(|i| i.id).unwrap_or_default();
        println!(
            "(first {} shown; --after {last} for the next page)",
            items.len()
        );
    }
    Ok(())
}

/// `reconcile show --json`.
#[derive(Serialize)]
struct ItemDetail {
    item: ReconciliationItem,
    intent: Option<IntentRow>,
    attempts: Vec<AttemptRow>,
}

async fn show(db: &Database, id: ReconciliationItemId, json: bool) -> Result<(), CommandError> {
    let store = db.operator_store();
    let item = store
        .get_reconciliation(id, &SCOPE)
        .await?
        .ok_or_else(|| CommandError::not_found(Subject::item(id)))?;
    let intent = store.get_intent(item.intent_id).await?;
    let attempts = store.list_attempts(item.intent_id).await?;
    if json {
        return print_json(&ItemDetail {
            item,
            intent,
            attempts,
        });
    }
    let now = Utc::now();
    print!("{}", item_block(&item, now));
    if let Some(intent) = &intent {
        println!();
        print!("{}", intent_block(intent, now));
    }
    println!();
    print!("{}", attempts_table(&attempts));
    if item.resolution.is_none() {
        println!();
        println!(
            "resolve with: outboxd reconcile resolve {} --as delivered --ref REF | redispatch [--confirm-may-act-twice] | abandoned --note WHY",
            item.id
        );
    }
    Ok(())
}

/// The resolution the arguments ask for, or why they do not make one.
fn resolution_kind(args: &ResolveArgs) -> Result<ResolutionKind, CommandError> {
    let reference = args
        .provider_ref
        .as_deref()
        .map(str::trim)
        .filter(|r| !r.is_empty());
    match (args.resolution, reference) {
        (ResolveAs::Delivered, Some(r)) => Ok(ResolutionKind::Delivered {
            provider_ref: r.to_owned(),
        }),
        (ResolveAs::Delivered, None) => Err(CommandError::Usage(
            "--as delivered needs --ref REF: the provider's reference for the operation \
             (it proves it happened); nothing changed"
                .into(),
        )),
        (_, Some(_)) => Err(CommandError::Usage(
            "--ref only goes with --as delivered; nothing changed".into(),
        )),
        (ResolveAs::Redispatch, None) => Ok(ResolutionKind::Redispatch),
        (ResolveAs::Abandoned, None) => Ok(ResolutionKind::Abandoned),
    }
}

async fn resolve(
    db: &Database,
    config: &Config,
    args: &ResolveArgs,
    json: bool,
) -> Result<(), CommandError> {
    let kind = resolution_kind(args)?;
    if args.note.trim().is_empty() {
        return Err(CommandError::Usage(
            "--note must say why (it is recorded in the audit log); nothing changed".into(),
        ));
    }
    let resolution = Resolution {
        item_id: args.id,
        scope: SCOPE,
        kind,
        actor: actor_or_default(args.actor.as_deref()),
        note: args.note.trim().to_owned(),
        now: Utc::now(),
        resend: ResendApproval {
            policies: Arc::new(resend_policies(config)),
            confirmed_may_act_twice: args.confirm_may_act_twice,
        },
        seen_attempt_count: None,
    };
    let store = db.operator_store();
    let intent_id = store
        .get_reconciliation(args.id, &SCOPE)
        .await?
        .map(|item| item.intent_id);
    let item = store
        .resolve_reconciliation(&resolution)
        .await
        .map_err(|e| {
            let subject = Subject::Item {
                item_id: args.id,
                intent_id,
            };
            CommandError::review(subject, e)
        })?;
    if json {
        return print_json(&item);
    }
    let what = match &resolution.kind {
        ResolutionKind::Delivered { provider_ref } => format!("delivered (ref {provider_ref})"),
        ResolutionKind::Redispatch => {
            "redispatch: the intent is pending again and will be sent with the same \
             idempotency key"
                .to_owned()
        }
        ResolutionKind::Abandoned => "abandoned".to_owned(),
    };
    println!(
        "resolved reconciliation item {} (intent {}, {} / {}) as {what}, by {}",
        item.id, item.intent_id, item.tenant, item.operation_id, resolution.actor
    );
    Ok(())
}
