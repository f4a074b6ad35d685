//! The closing table: effects per idempotency key (what the provider did), intents by
//! state (what the outbox says), and the invariant checker's counts.

use std::collections::BTreeMap;

use chrono::Utc;

use super::narrate::short_key;
use super::{Demo, DemoError};
use crate::checker::{check, CheckReport};
use crate::store::IntentFilter;

/// Prints the summary and returns the checker's report.
pub(super) async fn print(d: &mut Demo<'_>) -> Result<CheckReport, DemoError> {
    d.n.chapter("Summary")?;
    let intents = d
        .store
        .list_intents(&IntentFilter {
            limit: 1000,
            ..IntentFilter::default()
        })
        .await?;
    let mut references: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in d.provider.effects() {
        let key = e.key.unwrap_or_else(|| "(none)".to_owned());
        references.entry(key).or_default().push(e.reference);
    }
    d.n.raw("effects at the provider, per idempotency key")?;
    d.n.raw(format!(
        "  {:<16} {:<26} {:<18} {:>8} {:>7}  references",
        "key", "operation", "action", "requests", "effects"
    ))?;
    for intent in &intents {
        let key = intent.idempotency_key.as_str();
        let refs = references.get(key).cloned().unwrap_or_default();
        d.n.raw(format!(
            "  {:<16} {:<26} {:<18} {:>8} {:>7}  {}",
            short_key(key),
            intent.operation_id,
            intent.action,
            d.provider.request_count_for_key(key),
            refs.len(),
            refs.join(", ")
        ))?;
    }
    let summary = d.store.status_summary(Utc::now()).await?;
    d.n.raw("intents by state")?;
    for (state, count) in &summary.by_state {
        d.n.raw(format!("  {:<10} {count:>3}", state.as_str()))?;
    }
    d.n.raw(format!(
        "reconciliation backlog: {} open",
        summary.reconciliation_open
    ))?;
    let report = check(d.store.as_ref(), &d.provider, &d.actions, true).await?;
    d.n.raw(format!("invariant checker: {report}"))?;
    if report.is_clean() {
        d.n.raw("checker: clean — one effect per key, nothing lost, nothing resent after an ambiguous attempt")?;
    } else {
        d.n.raw("checker: VIOLATIONS found (see above)")?;
    }
    Ok(report)
}
