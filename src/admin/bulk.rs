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
use serde_json::json;
use utoipa::ToSchema;

use super::auth::Caller;
use super::error::responses::{E400, E401, E403, E500};
use super::error::ErrorDetail;
use super::extract::{non_empty, parse_limit, parse_older_than, ApiJson};
use super::ops::{required_note, resolve, ResolveRequest};
use super::{AdminContext, ApiError};
use crate::intent::{ActionName, IntentId, IntentState, OperationId, TenantId};
use crate::store::{
    resend_risk_of, NewAuditEntry, ReconciliationFilter, ReconciliationItem, ReconciliationItemId,
    ResolutionKind, ReviewError, TenantScope, CONFIRM_FIELD,
};

/// Default number of items one run looks at.
const DEFAULT_BULK_LIMIT: u32 = 100;
/// Most items one run may look at.
const MAX_BULK_LIMIT: u32 = 1000;

/// Body of `POST /v1/reconciliation/redispatch`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct BulkBody {
    /// Only items of this action.
    action: Option<String>,
    /// Only this tenant (intersected with the token's).
    tenant: Option<String>,
    /// Whole seconds (`3600`) or a duration (`2h`, `1h 30m`): only items opened before
    /// now − older_than.
    older_than: Option<String>,
    /// List the items a real run would redispatch, and change nothing.
    dry_run: bool,
    /// Why (required for a real run; audited).
    note: Option<String>,
    /// Most items the run looks at, 1–1000 (default 100).
    #[schema(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
    /// Act on exactly these items (the dry run's), however the queue changed since.
    item_ids: Option<Vec<ReconciliationItemId>>,
    /// Required (`true`) for a real run if any of its items may act twice when sent again
    /// (see `POST /v1/reconciliation/{id}/resolve`); without it the whole run answers 400
    /// with `error.field = "confirm_may_act_twice"` before anything changes. A dry run
    /// reports each such item's reason in `may_act_twice`.
    #[serde(default)]
    confirm_may_act_twice: bool,
}

/// The report of one run (dry or real).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct BulkReport {
    /// Whether this was a dry run (nothing changed).
    dry_run: bool,
    /// The run's filter, as parsed.
    filter: BulkFilter,
    /// How many items ended with each result.
    summary: BTreeMap<BulkResult, usize>,
    /// One line per item, by item id.
    items: Vec<BulkItem>,
}

/// The filter of one run, as parsed (echoed in the report and the audit entry).
#[derive(Debug, Clone, Serialize, ToSchema)]
struct BulkFilter {
    /// Only items of this action.
    action: Option<String>,
    /// Only this tenant.
    tenant: Option<String>,
    /// Only items opened before this instant (from `older_than`).
    opened_before: Option<DateTime<Utc>>,
    /// Most items the run looks at.
    limit: u32,
    /// Exactly these items, if given.
    item_ids: Option<Vec<ReconciliationItemId>>,
}

/// What happened to one item of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
enum BulkResult {
    /// A dry run would redispatch it.
    WouldRedispatch,
    /// Redispatched.
    Redispatched,
    /// Someone resolved it first.
    AlreadyResolved,
    /// Its intent is no longer `unknown`.
    WrongState,
    /// No such item in the token's tenants.
    NotFound,
    /// A requested id that no longer matches the filter.
    NotMatching,
    /// It may act twice and the run did not confirm it.
    ConfirmationRequired,
    /// Resolving it failed (see `detail`).
    Error,
}

/// One item of the report.
#[derive(Debug, Clone, Serialize, ToSchema)]
struct BulkItem {
    item_id: ReconciliationItemId,
    #[serde(skip_serializing_if = "Option::is_none")]
    intent_id: Option<IntentId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tenant: Option<TenantId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    operation_id: Option<OperationId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    action: Option<ActionName>,
    #[serde(skip_serializing_if = "Option::is_none")]
    opened_at: Option<DateTime<Utc>>,
    /// What happened to it.
    result: BulkResult,
    /// Why redispatching it may act twice (the resend rule), if it may.
    #[serde(skip_serializing_if = "Option::is_none")]
    may_act_twice: Option<String>,
    /// The error, unless it was redispatched (or would be).
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<ErrorDetail>,
}

impl BulkItem {
    fn of(item: &ReconciliationItem, result: BulkResult) -> Self {
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

    fn missing(item_id: ReconciliationItemId) -> Self {
        Self {
            item_id,
            intent_id: None,
            tenant: None,
            operation_id: None,
            action: None,
            opened_at: None,
            result: BulkResult::NotFound,
            may_act_twice: None,
            detail: None,
        }
    }
}

/// `POST /v1/reconciliation/redispatch` (operator only).
#[utoipa::path(
    post,
    path = "/v1/reconciliation/redispatch",
    tag = "reconciliation",
    operation_id = "bulkRedispatch",
    summary = "Redispatch open items by filter, or list them with `dry_run` (operator).",
    description = "A dry run lists exactly the items a real run would redispatch and changes nothing; a real run resolves each item on its own (a concurrent resolution wins or loses per item) and reports every item's result. Passing the dry run's `item_ids` makes the real run act on exactly those items.",
    request_body = BulkBody,
    responses(
        (status = 200, description = "The run's report, one result per item.", body = BulkReport),
        (status = 400, response = E400),
        (status = 401, response = E401),
        (status = 403, response = E403),
        (status = 500, response = E500),
    )
)]
pub(crate) async fn bulk_redispatch(
    State(ctx): State<AdminContext>,
    caller: Caller,
    ApiJson(body): ApiJson<BulkBody>,
) -> Result<Json<BulkReport>, ApiError> {
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
            let mut line = BulkItem::of(i, BulkResult::WouldRedispatch);
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
    Ok(Json(BulkReport {
        dry_run: body.dry_run,
        filter,
        summary: summarise(&report),
        items: report,
    }))
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
            Some(item) => skipped.push(BulkItem::of(&item, BulkResult::NotMatching)),
        }
    }
    Ok((chosen, skipped))
}

/// Whether an explicitly requested item still matches the run's filter (resolved items
/// do match: resolving them reports who was first).
fn matches_filter(item: &ReconciliationItem, filter: &BulkFilter) -> bool {
    let action_ok = match &filter.action {
        Some(action) => item.action == action.as_str(),
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
    let mut line = BulkItem::of(item, BulkResult::Redispatched);
    if let Err(e) = outcome {
        e.log();
        line.result = match &e {
            ApiError::Review(ReviewError::AlreadyResolved { .. }) => BulkResult::AlreadyResolved,
            ApiError::Review(ReviewError::WrongState { .. }) => BulkResult::WrongState,
            ApiError::Review(ReviewError::NotFound) => BulkResult::NotFound,
            ApiError::Review(ReviewError::Invalid(f)) if f.field == CONFIRM_FIELD => {
                BulkResult::ConfirmationRequired
            }
            _ => BulkResult::Error,
        };
        line.detail = Some(e.detail());
    }
    line
}

/// Counts per result.
fn summarise(report: &[BulkItem]) -> BTreeMap<BulkResult, usize> {
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
    let mut by_tenant: BTreeMap<&TenantId, Vec<&BulkItem>> = BTreeMap::new();
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
            tenant: Some(tenant.clone()),
            intent_id: None,
            details,
            note: Some(note.to_owned()),
            at: Utc::now(),
        };
        ctx.store.append_audit(&entry).await?;
    }
    Ok(())
}
