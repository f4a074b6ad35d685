//! What the checker looks at, gathered once: the intents as recorded, the open
//! reconciliation items, and the fake provider's effect and request logs. [`Evidence::evaluate`]
//! is a pure function of it, so a test can take a copy of a real run's evidence, break one
//! fact (reclassify an intent, drop a reference, add an effect) and see the report fail.

use std::collections::{BTreeSet, HashMap};

use chrono::{DateTime, Utc};

use crate::action::RetrySafety;
use crate::dispatch::ActionTable;
use crate::fake_provider::{Effect, FakeProvider, FaultKind, RequestRecord};
use crate::intent::{IntentId, IntentState};
use crate::store::{IntentFilter, IntentRow, ReadStore, StoreError};

use super::CheckReport;

/// Everything the checker needs, independent of the dispatcher's own counters.
#[derive(Debug, Clone, Default)]
pub struct Evidence {
    /// Every intent in the outbox.
    pub intents: Vec<IntentRow>,
    /// Intents with an open reconciliation item.
    pub open_reconciliation: BTreeSet<IntentId>,
    /// The retry safety of each action the intents name (absent: not configured).
    pub safety: HashMap<String, RetrySafety>,
    /// Every effect the provider applied.
    pub effects: Vec<Effect>,
    /// Every request the provider recorded (empty when recording is off).
    pub requests: Vec<RequestRecord>,
    /// Requests the provider received, recorded or not.
    pub request_total: usize,
}

async fn all_intents(store: &(impl ReadStore + ?Sized)) -> Result<Vec<IntentRow>, StoreError> {
    let mut out = Vec::new();
    loop {
        let page = store
            .list_intents(&IntentFilter {
                after_id: out.last().map(|i: &IntentRow| i.id),
                limit: 1000,
                ..IntentFilter::default()
            })
            .await?;
        let done = page.len() < 1000;
        out.extend(page);
        if done {
            return Ok(out);
        }
    }
}

/// Requests that may have applied: every answer except "did not apply".
fn may_have_applied(fault: Option<FaultKind>) -> bool {
    !matches!(
        fault,
        Some(FaultKind::StatusWithoutApply | FaultKind::RedirectWithoutApply)
    )
}

/// Status lookups (`GET /lookup/<key>`, sent by probes with the key header) apply nothing.
fn is_lookup(r: &RequestRecord) -> bool {
    matches!(r.method.as_str(), "GET" | "HEAD")
}

/// What the provider holds for one key.
#[derive(Debug, Default)]
struct KeyLog<'a> {
    effects: Vec<&'a Effect>,
    /// Non-lookup requests, in arrival order.
    requests: Vec<&'a RequestRecord>,
}

impl Evidence {
    /// Reads the outbox and the provider's logs.
    pub async fn gather(
        store: &(impl ReadStore + ?Sized),
        provider: &FakeProvider,
        actions: &ActionTable,
    ) -> Result<Evidence, StoreError> {
        let intents = all_intents(store).await?;
        let open_reconciliation = store
            .open_reconciliation_intents()
            .await?
            .into_iter()
            .collect();
        let safety = intents
            .iter()
            .filter_map(|i| {
                let a = actions.get(i.action.as_str())?;
                Some((i.action.to_string(), a.retry_safety))
            })
            .collect();
        Ok(Evidence {
            intents,
            open_reconciliation,
            safety,
            effects: provider.effects(),
            requests: provider.requests(),
            request_total: provider.request_count(),
        })
    }

    fn by_key(&self) -> HashMap<&str, KeyLog<'_>> {
        let mut logs: HashMap<&str, KeyLog<'_>> = HashMap::new();
        for e in &self.effects {
            if let Some(k) = &e.key {
                logs.entry(k).or_default().effects.push(e);
            }
        }
        let mut requests: Vec<&RequestRecord> =
            self.requests.iter().filter(|r| !is_lookup(r)).collect();
        requests.sort_by_key(|r| r.seq);
        for r in requests {
            if let Some(k) = &r.idempotency_key {
                logs.entry(k).or_default().requests.push(r);
            }
        }
        logs
    }

    /// Counts every violation. With `settled`, anything still pending or in flight counts
    /// as lost and a lease expired before `now` as stale.
    pub fn evaluate(&self, settled: bool, now: DateTime<Utc>) -> CheckReport {
        let mut report = CheckReport {
            committed: self.intents.len(),
            effects: self.effects.len(),
            requests: self.request_total,
            ..CheckReport::default()
        };
        let keys: BTreeSet<&str> = self
            .intents
            .iter()
            .map(|i| i.idempotency_key.as_str())
            .collect();
        for e in &self.effects {
            if !e.key.as_deref().is_some_and(|k| keys.contains(k)) {
                report.unexpected += 1;
                report.violation(format!(
                    "effect {} has no intent (key {:?})",
                    e.reference, e.key
                ));
            }
        }
        let logs = self.by_key();
        let empty = KeyLog::default();
        for intent in &self.intents {
            let log = logs.get(intent.idempotency_key.as_str()).unwrap_or(&empty);
            let safety = self.safety.get(intent.action.as_str()).copied();
            let open = self.open_reconciliation.contains(&intent.id);
            check_intent(&mut report, intent, safety, log, open, settled, now);
        }
        report
    }
}

fn check_intent(
    report: &mut CheckReport,
    intent: &IntentRow,
    safety: Option<RetrySafety>,
    log: &KeyLog<'_>,
    open: bool,
    settled: bool,
    now: DateTime<Utc>,
) {
    let id = intent.id;
    let key = intent.idempotency_key.as_str();
    match intent.state {
        IntentState::Delivered => report.delivered += 1,
        IntentState::Failed => report.failed += 1,
        IntentState::Unknown => report.unknown += 1,
        _ => {}
    }
    if log
        .requests
        .iter()
        .any(|r| r.fault.is_some() && may_have_applied(r.fault))
    {
        report.ambiguous += 1;
    }
    check_duplicates(report, intent, safety, log);
    if log.requests.len() > usize::try_from(intent.attempt_count).unwrap_or(0) {
        report.unattributed_requests += 1;
        report.violation(format!(
            "intent {id}: the provider received {} requests for key {key}, but only {} attempts were started",
            log.requests.len(),
            intent.attempt_count
        ));
    }
    if intent.state == IntentState::Delivered {
        check_reference(report, intent, log);
    }
    let unsettled = matches!(intent.state, IntentState::Pending | IntentState::InFlight);
    if settled && unsettled {
        report.lost += 1;
        report.violation(format!("intent {id}: still {} after the run", intent.state));
    }
    if settled
        && intent.state == IntentState::InFlight
        && intent.lease_expires_at.is_some_and(|t| t < now)
    {
        report.stale_leases += 1;
    }
    check_accounted(report, intent, safety, log, open, settled);
}

/// At most one effect per key; no request of a `not_idempotent` action after one that may
/// have applied.
fn check_duplicates(
    report: &mut CheckReport,
    intent: &IntentRow,
    safety: Option<RetrySafety>,
    log: &KeyLog<'_>,
) {
    let id = intent.id;
    let key = intent.idempotency_key.as_str();
    if log.effects.len() > 1 {
        report.duplicated += 1;
        report.violation(format!(
            "intent {id}: {} effects for key {key}",
            log.effects.len()
        ));
    }
    if safety != Some(RetrySafety::NotIdempotent) {
        return;
    }
    let first_applying = log.requests.iter().position(|r| may_have_applied(r.fault));
    if let Some(first) = first_applying {
        let resends = log.requests.len() - first - 1;
        if resends > 0 {
            report.duplicated += 1;
            report.violation(format!(
                "intent {id}: not_idempotent action sent {resends} more time(s) after request {} may have applied",
                log.requests[first].seq
            ));
        }
    }
}

/// A delivered intent has exactly the provider's reference for its key.
fn check_reference(report: &mut CheckReport, intent: &IntentRow, log: &KeyLog<'_>) {
    let id = intent.id;
    match (log.effects.first(), intent.provider_ref.as_deref()) {
        (None, _) => {
            report.lost += 1;
            report.violation(format!(
                "intent {id}: delivered but the provider has no effect"
            ));
        }
        (Some(e), None) => {
            report.reference_mismatches += 1;
            report.violation(format!(
                "intent {id}: delivered without a provider reference (the provider has {})",
                e.reference
            ));
        }
        (Some(e), Some(stored)) if e.reference != stored => {
            report.reference_mismatches += 1;
            report.violation(format!(
                "intent {id}: stored reference {stored}, provider has {}",
                e.reference
            ));
        }
        _ => {}
    }
}

/// An intent the provider acted on ends delivered, in reconciliation or resolved by a
/// person — never failed, cancelled or quietly pending.
fn check_accounted(
    report: &mut CheckReport,
    intent: &IntentRow,
    safety: Option<RetrySafety>,
    log: &KeyLog<'_>,
    open: bool,
    settled: bool,
) {
    let acted = !log.effects.is_empty();
    let self_declared = intent.ambiguous_attempts > 0;
    if !acted && !self_declared {
        return;
    }
    let accounted = match intent.state {
        IntentState::Delivered | IntentState::Abandoned => true,
        IntentState::Unknown => open,
        IntentState::InFlight => !settled,
        IntentState::Pending => !settled && safety != Some(RetrySafety::NotIdempotent),
        IntentState::Failed | IntentState::Cancelled => false,
    };
    if !accounted {
        report.unaccounted_ambiguous += 1;
        let why = if acted {
            "the provider applied it"
        } else {
            "its attempts were ambiguous"
        };
        report.violation(format!(
            "intent {}: {why}, but its state is {}{}",
            intent.id,
            intent.state,
            if intent.state == IntentState::Unknown {
                " without an open reconciliation item"
            } else {
                ""
            }
        ));
    }
}
