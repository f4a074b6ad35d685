//! `POST /v1/reconciliation/redispatch`: redispatch open items by filter. A dry run lists
//! exactly the items a real run would redispatch and changes nothing; a real run resolves
//! each of those items individually (so a concurrent resolution wins or loses per item,
//! never silently) and reports every item's result. Passing the dry run's `item_ids`
//! makes the real run act on exactly those ids, however the queue changed in between.
//! When any of the items would be a resend that may act twice (the resend rule), the dry
//! run says why per item (`may_act_twice`), and a real run without
//! `"confirm_may_act_twice": true` is refused whole (`400` naming that field), before
//! anything changes.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::auth::Caller;
use super::extract::{non_empty, parse_limit, parse_older_than, ApiJson};
use super::ops::{required_note, resolve, ResolveRequest};
use super::{AdminContext, ApiError};
use crate::intent::IntentState;
use crate::store::{
    resend_risk_of, NewAuditEntry, ReconciliationFilter, ReconciliationItem, ResolutionKind,
    ReviewError, TenantScope, CONFIRM_FIELD,
};

/// Default number of items one run looks at.
const DEFAULT_BULK_LIMIT: u32 = 100;
/// Most items one run may look at.
const MAX_BULK_LIMIT: u32 = 1000;

/// Body of `POST /v1/reconciliation/redispatch`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BulkBody {
    action: Option<String>,
    tenant: Option<String>,
    older_than: Option<String>,
    dry_run: bool,
    note: Option<String>,
    limit: Option<u32>,
    item_ids: Option<Vec<i64>>,
    #[serde(default)]
    confirm_may_act_twice: bool,
}

/// The filter of one run, as parsed (echoed in the report and the audit entry).
#[derive(Debug, Clone, Serialize)]
struct BulkFilter {
    action: Option<String>,
    tenant: Option<String>,
    opened_before: Option<DateTime<Utc>>,
    limit: u32,
    item_ids: Option<Vec<i64>>,
}

/// One item of the report.
#[derive(Debug, Clone, Serialize)]
struct BulkItem {
    item_id: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    intent_id: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tenant: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    operation_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    action: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    opened_at: Option<DateTime<Utc>>,
    /// `would_redispatch` (dry run), `redispatched`, `already_resolved`, `wrong_state`,
    /// `not_found`, `not_matching`, `confirmation_required` or `error`.
    result: &'static str,
    /// Why redispatching it may act twice (the resend rule), if it may.
    #[serde(skip_serializing_if = "Option::is_none")]
    may_act_twice: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<Value>,
}

impl BulkItem {
    fn of(item: &ReconciliationItem, result: &'static str) -> Self {
        Self {
            item_id: item.id,
            intent_id: Some(item.intent_id),
            tenant: Some(item.tenant.clone()),
            operation_id: Some(item.operation_id.clone()),
            action: Some(item.action.clone()),
            opened_at: Some(item.opened_at),
            result,
            may_act_twice: None,
            detail: None,
        }
    }

    fn missing(item_id: i64) -> Self {
        Self {
            item_id,
            intent_id: None,
            tenant: None,
            operation_id: None,
            action: None,
            opened_at: None,
            result: "not_found",
            may_act_twice: None,
            detail: None,
        }
    }
}

/// `POST /v1/reconciliation/redispatch` (operator only).
pub(crate) async fn bulk_redispatch(
    State(ctx): State<AdminContext>,
    caller: Caller,
    ApiJson(body): ApiJson<BulkBody>,
) -> Result<Json<Value>, ApiError> {
    caller.require_operator()?;
    let note = match body.dry_run {
        true => body.note.clone().unwrap_or_default(),
        false => required_note(body.note.as_deref())?,
    };
    let filter = BulkFilter {
        action: non_empty(body.action),
        tenant: non_empty(body.tenant),
        opened_before: parse_older_than(body.older_than.as_deref(), Utc::now())?,
        limit: parse_limit(body.limit, DEFAULT_BULK_LIMIT, MAX_BULK_LIMIT)?,
        item_ids: body.item_ids,
    };
    let scope = caller.scope_for(filter.tenant.as_deref());
    let (candidates, mut report) = select(&ctx, &scope, &filter).await?;
    let risks = twice_risks(&ctx, &candidates).await?;
    if body.dry_run {
        report.extend(candidates.iter().zip(&risks).map(|(i, risk)| {
            let mut line = BulkItem::of(i, "would_redispatch");
            line.may_act_twice = risk.clone();
            line
        }));
    } else {
        refuse_unconfirmed(&candidates, &risks, body.confirm_may_act_twice)?;
        for item in &candidates {
            let line = redispatch_one(&ctx, &caller, item, &note, body.confirm_may_act_twice);
            report.push(line.await);
        }
        ctx.wake_dispatcher.notify_one();
        audit_run(&ctx, &caller, &filter, &report, &note).await?;
    }
    report.sort_by_key(|i| i.item_id);
    Ok(Json(json!({
        "dry_run": body.dry_run,
        "filter": filter,
        "summary": summarise(&report),
        "items": report,
    })))
}

/// The items a run acts on, plus report lines for requested ids it will not act on.
async fn select(
    ctx: &AdminContext,
    scope: &TenantScope,
    filter: &BulkFilter,
) -> Result<(Vec<ReconciliationItem>, Vec<BulkItem>), ApiError> {
    let Some(ids) = &filter.item_ids else {
        let items = ctx
            .store
            .list_reconciliation(&ReconciliationFilter {
                scope: scope.clone(),
                open_only: true,
                action: filter.action.clone(),
                opened_before: filter.opened_before,
                after_id: None,
                limit: filter.limit,
            })
            .await?;
        return Ok((items, Vec::new()));
    };
    if ids.len() > filter.limit as usize {
        return Err(ApiError::invalid(
            "item_ids",
            format!("lists {} items; the limit is {}", ids.len(), filter.limit),
        ));
    }
    let mut chosen = Vec::new();
    let mut skipped = Vec::new();
    for &id in ids {
        match ctx.store.get_reconciliation(id, scope).await? {
            None => skipped.push(BulkItem::missing(id)),
            Some(item) if matches_filter(&item, filter) => chosen.push(item),
            Some(item) => skipped.push(BulkItem::of(&item, "not_matching")),
        }
    }
    Ok((chosen, skipped))
}

/// Whether an explicitly requested item still matches the run's filter (resolved items
/// do match: resolving them reports who was first).
fn matches_filter(item: &ReconciliationItem, filter: &BulkFilter) -> bool {
    let action_ok = match &filter.action {
        Some(action) => *action == item.action,
        None => true,
    };
    let age_ok = match filter.opened_before {
        Some(before) => item.opened_at < before,
        None => true,
    };
    action_ok && age_ok
}

/// Why redispatching each candidate may act twice (the resend rule, now), if it may.
async fn twice_risks(
    ctx: &AdminContext,
    candidates: &[ReconciliationItem],
) -> Result<Vec<Option<String>>, ApiError> {
    let policies = ctx.resend_policies();
    let now = Utc::now();
    let mut risks = Vec::with_capacity(candidates.len());
    for item in candidates {
        // A resolved item is reported as such and never redispatched: no risk to confirm.
        if item.resolved_at.is_some() {
            risks.push(None);
            continue;
        }
        let intent = ctx.store.get_intent(item.intent_id).await?;
        risks.push(
            intent
                .filter(|i| i.state == IntentState::Unknown)
                .and_then(|i| resend_risk_of(&policies, &i, now))
                .map(|r| r.explain()),
        );
    }
    Ok(risks)
}

/// Refuses the whole run, before anything changes, when an item may act twice and the
/// caller did not confirm it.
fn refuse_unconfirmed(
    candidates: &[ReconciliationItem],
    risks: &[Option<String>],
    confirmed: bool,
) -> Result<(), ApiError> {
    if confirmed {
        return Ok(());
    }
    let risky: Vec<String> = candidates
        .iter()
        .zip(risks)
        .filter_map(|(item, risk)| risk.as_ref().map(|r| format!("item {}: {r}", item.id)))
        .collect();
    if risky.is_empty() {
        return Ok(());
    }
    Err(ApiError::invalid(
        CONFIRM_FIELD,
        format!(
            "{} of the items may act twice when sent again ({}); pass \"{CONFIRM_FIELD}\": true \
             to send them anyway; nothing changed",
            risky.len(),
            risky.join("; ")
        ),
    ))
}

/// Resolves one item as `redispatch`, reporting the outcome instead of failing the run.
async fn redispatch_one(
    ctx: &AdminContext,
    caller: &Caller,
    item: &ReconciliationItem,
    note: &str,
    confirmed: bool,
) -> BulkItem {
    let request = ResolveRequest::new(ResolutionKind::Redispatch, note.to_owned(), confirmed);
    let outcome = resolve(ctx, caller, item.id, request).await;
    let mut line = BulkItem::of(item, "redispatched");
    if let Err(e) = outcome {
        e.log();
        line.result = match &e {
            ApiError::Review(ReviewError::AlreadyResolved { .. }) => "already_resolved",
            ApiError::Review(ReviewError::WrongState { .. }) => "wrong_state",
            ApiError::Review(ReviewError::NotFound) => "not_found",
            ApiError::Review(ReviewError::Invalid(f)) if f.field == CONFIRM_FIELD => {
                "confirmation_required"
            }
            _ => "error",
        };
        line.detail = Some(e.body()["error"].clone());
    }
    line
}

/// Counts per result.
fn summarise(report: &[BulkItem]) -> BTreeMap<&'static str, usize> {
    let mut counts = BTreeMap::new();
    for line in report {
        *counts.entry(line.result).or_insert(0) += 1;
    }
    counts
}

/// One `reconciliation.bulk_redispatch` entry per tenant the run touched, so each tenant's
/// operators see the run in their own audit log and nobody sees another tenant's items.
/// (Each redispatched item also has its own `reconciliation.resolve` entry.)
async fn audit_run(
    ctx: &AdminContext,
    caller: &Caller,
    filter: &BulkFilter,
    report: &[BulkItem],
    note: &str,
) -> Result<(), ApiError> {
    let run_id = format!("{:016x}", rand::random::<u64>());
    let mut by_tenant: BTreeMap<&str, Vec<&BulkItem>> = BTreeMap::new();
    for line in report {
        if let Some(tenant) = &line.tenant {
            by_tenant.entry(tenant).or_default().push(line);
        }
    }
    for (tenant, lines) in by_tenant {
        let owned: Vec<BulkItem> = lines.into_iter().cloned().collect();
        let details = json!({
            "run_id": run_id,
            "filter": {"action": filter.action, "opened_before": filter.opened_before,
                "limit": filter.limit, "explicit_ids": filter.item_ids.is_some()},
            "summary": summarise(&owned),
            "items": owned.iter().map(|l| json!({"item_id": l.item_id, "intent_id": l.intent_id, "result": l.result})).collect::<Vec<_>>(),
        });
        let entry = NewAuditEntry {
            actor: caller.name.clone(),
            action: "reconciliation.bulk_redispatch".into(),
            tenant: Some(tenant.to_owned()),
            intent_id: None,
            details,
            note: Some(note.to_owned()),
            at: Utc::now(),
        };
        ctx.store.append_audit(&entry).await?;
    }
    Ok(())
}
