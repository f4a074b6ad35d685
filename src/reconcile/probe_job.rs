//! The probe job: for every open reconciliation item whose action declares a status
//! lookup, send the lookup through the action's provider client (so authentication,
//! signing, timeouts and the address guard apply), let [`classify_probe`] decide what it
//! proves, and act: resolve `delivered` or `redispatch` as actor [`PROBE_ACTOR`], or attach
//! the finding for a person. One pass is [`run_probes_once`]; scheduling lives in
//! [`super::jobs`].

use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures_util::{stream, StreamExt};
use serde::Serialize;

use super::probe::{classify_probe, ProbeContext, ProbeFinding, ProbeRuntime};
use crate::action::resend::ResendPolicies;
use crate::action::AttemptClass;
use crate::dispatch::actions::{render_path, PathFields};
use crate::dispatch::{ActionRuntime, ActionTable};
use crate::provider::DeliveryRequest;
use crate::store::{
    OperatorStore, ReconciliationFilter, ReconciliationItem, ResendApproval, Resolution,
    ResolutionKind, ReviewError, StoreError, TenantScope, CONFIRM_FIELD,
};

/// The actor recorded on resolutions (and audit entries) made by the probe.
pub const PROBE_ACTOR: &str = "probe";

/// How the probe job paces itself.
#[derive(Debug, Clone)]
pub struct ProbeSettings {
    /// Lookups in flight at once.
    pub concurrency: usize,
    /// After an inconclusive probe, wait at least this long before probing the item again;
    /// the wait doubles with every further probe up to `max_interval`. Zero: every run.
    pub min_interval: Duration,
    /// The longest wait between two probes of one item.
    pub max_interval: Duration,
    /// Open items read per query.
    pub page_size: u32,
}

impl Default for ProbeSettings {
    /// 8 lookups at once; re-probe after 1 min, 2 min, 4 min ... at most hourly.
    fn default() -> Self {
        Self {
            concurrency: 8,
            min_interval: Duration::from_secs(60),
            max_interval: Duration::from_secs(3600),
            page_size: 500,
        }
    }
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ProbeReport {
    /// Open items whose action declares a probe.
    pub probeable: usize,
    /// Lookups sent.
    pub probed: usize,
    /// Resolved `delivered` by the probe.
    pub delivered: usize,
    /// Resolved `redispatch` by the probe.
    pub redispatched: usize,
    /// Left open with a finding.
    pub left_for_person: usize,
    /// Resolved by someone else while the lookup ran.
    pub already_resolved: usize,
    /// Items whose finding or resolution could not be recorded (logged).
    pub errors: usize,
}

/// Whether `item` is due for a probe: never probed, or its back-off has passed.
pub fn probe_due(item: &ReconciliationItem, settings: &ProbeSettings, now: DateTime<Utc>) -> bool {
    let Some(last) = item.probe_checked_at else {
        return true;
    };
    let doublings = u32::try_from(item.probe_count.saturating_sub(1).clamp(0, 30)).unwrap_or(0);
    let wait = settings
        .min_interval
        .saturating_mul(2u32.saturating_pow(doublings))
        .min(settings.max_interval);
    match chrono::Duration::from_std(wait) {
        Ok(wait) => now >= last + wait,
        Err(_) => false,
    }
}

/// Probes every due open item once and acts on what each lookup proves.
pub async fn run_probes_once(
    store: &(impl OperatorStore + ?Sized),
    actions: &ActionTable,
    settings: &ProbeSettings,
) -> Result<ProbeReport, StoreError> {
    let now = Utc::now();
    let mut report = ProbeReport::default();
    let mut due = Vec::new();
    for item in open_items(store, settings.page_size).await? {
        let Some(action) = actions.get(item.action.as_str()) else {
            continue;
        };
        if action.probe.is_none() {
            continue;
        }
        report.probeable += 1;
        if probe_due(&item, settings, now) {
            due.push((action.clone(), item));
        }
    }
    let outcomes: Vec<ItemOutcome> = stream::iter(due)
        .map(|(action, item)| async move { probe_item(store, &action, &item).await })
        .buffer_unordered(settings.concurrency.max(1))
        .collect()
        .await;
    for outcome in outcomes {
        report.probed += 1;
        match outcome {
            ItemOutcome::Delivered => report.delivered += 1,
            ItemOutcome::Redispatched => report.redispatched += 1,
            ItemOutcome::LeftForPerson => report.left_for_person += 1,
            ItemOutcome::AlreadyResolved => report.already_resolved += 1,
            ItemOutcome::Error => report.errors += 1,
        }
    }
    if report.probed > 0 {
        tracing::info!(?report, "status probe pass finished");
    }
    Ok(report)
}

/// Every open item, oldest first, read in pages.
async fn open_items(
    store: &(impl OperatorStore + ?Sized),
    page_size: u32,
) -> Result<Vec<ReconciliationItem>, StoreError> {
    let mut items: Vec<ReconciliationItem> = Vec::new();
    loop {
        let mut filter = ReconciliationFilter::open(TenantScope::All, page_size.max(1));
        filter.after_id = items.iter().map(|i| i.id).max();
        let page = store.list_reconciliation(&filter).await?;
        let full = page.len() >= page_size.max(1) as usize;
        items.extend(page);
        if !full {
            return Ok(items);
        }
    }
}

/// What happened to one item.
enum ItemOutcome {
    Delivered,
    Redispatched,
    LeftForPerson,
    AlreadyResolved,
    Error,
}

/// Probes one item and records the result; errors are logged, never propagated, so one
/// bad item does not stop the pass.
async fn probe_item(
    store: &(impl OperatorStore + ?Sized),
    action: &ActionRuntime,
    item: &ReconciliationItem,
) -> ItemOutcome {
    let Some(probe) = &action.probe else {
        return ItemOutcome::LeftForPerson;
    };
    match lookup_and_record(store, action, probe, item).await {
        Ok(outcome) => outcome,
        Err(error) => {
            tracing::warn!(item_id = item.id.get(), intent_id = item.intent_id.get(), action = %item.action,
                %error, "status probe could not record its result");
            ItemOutcome::Error
        }
    }
}

async fn lookup_and_record(
    store: &(impl OperatorStore + ?Sized),
    action: &ActionRuntime,
    probe: &ProbeRuntime,
    item: &ReconciliationItem,
) -> Result<ItemOutcome, ReviewError> {
    let first_sent_at = first_sent_at(store, item).await?;
    let probe_redispatches = probe_redispatches(store, item).await?;
    let path = render_path(
        &probe.path,
        PathFields {
            tenant: item.tenant.as_str(),
            operation_id: item.operation_id.as_str(),
            idempotency_key: item.idempotency_key.as_str(),
            intent_id: item.intent_id.get(),
        },
    );
    let lookup = format!("{} {path}", probe.method);
    let request = DeliveryRequest {
        method: probe.method.clone(),
        path,
        idempotency_key: item.idempotency_key.to_string(),
        body: Bytes::new(),
    };
    let observation = action.client.send(&request).await;
    let now = Utc::now();
    let ctx = ProbeContext {
        lookup: &lookup,
        retry_safety: action.retry_safety,
        key_retention: action.key_retention,
        first_sent_at,
        probe_redispatches,
        now,
    };
    let finding = classify_probe(&observation, probe, &ctx);
    let (kind, note) = match finding {
        ProbeFinding::Found { provider_ref, note } => {
            (ResolutionKind::Delivered { provider_ref }, note)
        }
        ProbeFinding::NotApplied { note } => (ResolutionKind::Redispatch, note),
        ProbeFinding::Inconclusive { finding } => {
            tracing::info!(item_id = item.id.get(), intent_id = item.intent_id.get(), %finding,
                "status probe inconclusive; left for a person");
            store.record_probe_finding(item.id, &finding, now).await?;
            return Ok(ItemOutcome::LeftForPerson);
        }
    };
    store.record_probe_finding(item.id, &note, now).await?;
    resolve(store, action, item, kind, note, now).await
}

/// Resolves the item as the probe. A probe never confirms a resend that may act twice:
/// the store refuses such a redispatch, and the item is left for a person.
async fn resolve(
    store: &(impl OperatorStore + ?Sized),
    action: &ActionRuntime,
    item: &ReconciliationItem,
    kind: ResolutionKind,
    note: String,
    now: DateTime<Utc>,
) -> Result<ItemOutcome, ReviewError> {
    let outcome = match kind {
        ResolutionKind::Redispatch => ItemOutcome::Redispatched,
        _ => ItemOutcome::Delivered,
    };
    let resolution = Resolution {
        item_id: item.id,
        scope: TenantScope::All,
        kind,
        actor: PROBE_ACTOR.to_owned(),
        note,
        now,
        resend: ResendApproval {
            policies: std::sync::Arc::new(ResendPolicies::new([(
                action.name.clone(),
                action.resend_policy(),
            )])),
            confirmed_may_act_twice: false,
        },
        seen_attempt_count: None,
    };
    match store.resolve_reconciliation(&resolution).await {
        Ok(resolved) => {
            tracing::info!(
                item_id = item.id.get(),
                intent_id = item.intent_id.get(),
                resolution = resolved.resolution.as_deref().unwrap_or(""),
                "status probe resolved a reconciliation item"
            );
            Ok(outcome)
        }
        Err(ReviewError::AlreadyResolved { .. } | ReviewError::NotFound) => {
            Ok(ItemOutcome::AlreadyResolved)
        }
        Err(ReviewError::Invalid(field)) if field.field == CONFIRM_FIELD => {
            tracing::info!(item_id = item.id.get(), intent_id = item.intent_id.get(), reason = %field.reason,
                "status probe found it not applied, but a resend may act twice; left for a person");
            Ok(ItemOutcome::LeftForPerson)
        }
        Err(other) => Err(other),
    }
}

/// When a request with this key may first have reached the provider: the earliest
/// attempt of the intent's whole history not classified `not_sent`.
async fn first_sent_at(
    store: &(impl OperatorStore + ?Sized),
    item: &ReconciliationItem,
) -> Result<Option<DateTime<Utc>>, StoreError> {
    let attempts = store.list_attempts(item.intent_id).await?;
    Ok(attempts
        .iter()
        .filter(|a| a.class != Some(AttemptClass::NotSent))
        .map(|a| a.started_at)
        .min())
}

/// Earlier items of the same intent that the probe resolved as `redispatch`.
async fn probe_redispatches(
    store: &(impl OperatorStore + ?Sized),
    item: &ReconciliationItem,
) -> Result<u32, StoreError> {
    let history = store.reconciliation_for_intent(item.intent_id).await?;
    let count = history
        .iter()
        .filter(|i| i.resolved_by.as_deref() == Some(PROBE_ACTOR))
        .filter(|i| i.resolution.as_deref() == Some("redispatch"))
        .count();
    Ok(u32::try_from(count).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intent::{ActionName, IdempotencyKey, IntentId, OperationId, TenantId};
    use crate::store::ReconciliationItemId;

    fn item(
        probe_count: i32,
        checked_ago_secs: Option<i64>,
        now: DateTime<Utc>,
    ) -> ReconciliationItem {
        ReconciliationItem {
            id: ReconciliationItemId::new(1),
            intent_id: IntentId::new(1),
            tenant: TenantId::parse("t").unwrap(),
            operation_id: OperationId::parse("op").unwrap(),
            action: ActionName::parse("a").unwrap(),
            idempotency_key: IdempotencyKey::parse("k").unwrap(),
            reason: "r".into(),
            opened_at: now,
            resolution: None,
            resolved_by: None,
            resolved_at: None,
            resolution_note: None,
            resolved_provider_ref: None,
            probe_finding: None,
            probe_checked_at: checked_ago_secs.map(|s| now - chrono::Duration::seconds(s)),
            probe_count,
        }
    }

    #[test]
    fn probes_back_off_exponentially_up_to_the_cap() {
        let now = Utc::now();
        let s = ProbeSettings::default();
        for (count, ago, due) in [
            (0, None, true),
            (1, Some(59), false),
            (1, Some(60), true),
            (2, Some(119), false),
            (2, Some(120), true),
            (3, Some(239), false),
            (30, Some(3599), false),
            (30, Some(3600), true),
            (i32::MAX, Some(3600), true),
        ] {
            assert_eq!(
                probe_due(&item(count, ago, now), &s, now),
                due,
                "{count} {ago:?}"
            );
        }
        let every_run = ProbeSettings {
            min_interval: Duration::ZERO,
            ..ProbeSettings::default()
        };
        assert!(probe_due(&item(5, Some(0), now), &every_run, now));
    }
}
