//! Text renderings of intents, attempts, reconciliation items and audit entries, shared by
//! the `reconcile`, `intents` and `audit` commands. Pure: values in, text out.

use chrono::{DateTime, Utc};

use super::table::{key_values, or_dash, short, time, time_ago, Table};
use crate::store::{AttemptRow, AuditEntry, IntentRow, ReconciliationItem};

/// Widest reason, finding or error shown in a list (`show` prints them whole).
const CELL: usize = 60;

/// The facts of one intent.
pub fn intent_block(intent: &IntentRow, now: DateTime<Utc>) -> String {
    let mut pairs = vec![
        ("tenant", intent.tenant.to_string()),
        ("operation", intent.operation_id.to_string()),
        ("action", intent.action.to_string()),
        ("state", intent.state.as_str().to_owned()),
        ("idempotency key", intent.idempotency_key.to_string()),
        ("payload sha256", intent.payload_sha256.clone()),
        ("attempts", attempt_counts(intent)),
        ("enqueued", time_ago(intent.created_at, now)),
        ("updated", time_ago(intent.updated_at, now)),
    ];
    if let Some(at) = intent.deadline_at {
        pairs.push(("deadline", deadline(at, now)));
    }
    if let Some(key) = &intent.ordering_key {
        pairs.push(("ordering key", key.to_string()));
    }
    if let Some(at) = intent.finished_at {
        pairs.push(("finished", time_ago(at, now)));
    }
    if let Some(reference) = &intent.provider_ref {
        pairs.push(("provider ref", reference.clone()));
    }
    if let Some(error) = &intent.last_error {
        let status = intent
            .last_http_status
            .map(|s| format!("HTTP {s}: "))
            .unwrap_or_default();
        pairs.push(("last error", format!("{status}{error}")));
    }
    format!("intent {}\n{}", intent.id, key_values(&pairs))
}

/// The producer's deadline with how far off it is: `… (in 5m)` or `… (passed 5m ago)`.
fn deadline(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    if at > now {
        format!("{} (in {})", time(at), super::table::age(now, at))
    } else {
        format!("{} (passed {} ago)", time(at), super::table::age(at, now))
    }
}

fn attempt_counts(intent: &IntentRow) -> String {
    format!(
        "{} ({} ambiguous)",
        intent.attempt_count, intent.ambiguous_attempts
    )
}

/// Every attempt, oldest first, errors in full.
pub fn attempts_table(attempts: &[AttemptRow]) -> String {
    if attempts.is_empty() {
        return "attempts: none\n".to_owned();
    }
    let mut table = Table::new(&[
        "#", "STARTED", "DURATION", "CLASS", "HTTP", "OWNER", "REF", "ERROR",
    ]);
    for a in attempts {
        table.row(vec![
            a.attempt_number.to_string(),
            time(a.started_at),
            a.duration_ms
                .map_or_else(|| "open".to_owned(), |ms| format!("{ms}ms")),
            a.class.map_or("open", |c| c.as_str()).to_owned(),
            or_dash(a.http_status),
            a.owner.clone(),
            or_dash(a.provider_ref.as_deref()),
            or_dash(a.error.as_deref()),
        ]);
    }
    format!("attempts\n{}", indent(&table.render()))
}

/// One reconciliation item's own facts (resolution and probe included).
pub fn item_block(item: &ReconciliationItem, now: DateTime<Utc>) -> String {
    let status = match &item.resolution {
        Some(resolution) => format!("resolved as {resolution}"),
        None => "open".to_owned(),
    };
    let mut pairs = vec![
        (
            "intent",
            format!(
                "{} ({} / {})",
                item.intent_id, item.tenant, item.operation_id
            ),
        ),
        ("action", item.action.to_string()),
        ("idempotency key", item.idempotency_key.to_string()),
        ("opened", time_ago(item.opened_at, now)),
        ("reason", item.reason.clone()),
    ];
    if let Some(finding) = &item.probe_finding {
        let checked = item.probe_checked_at.map(time).unwrap_or_default();
        pairs.push(("probe finding", finding.clone()));
        pairs.push((
            "probed",
            format!("{} time(s), last at {checked}", item.probe_count),
        ));
    }
    if let Some(resolution) = &item.resolution {
        pairs.push(("resolution", resolution.clone()));
        pairs.push(("resolved by", or_dash(item.resolved_by.as_deref())));
        pairs.push(("resolved at", or_dash(item.resolved_at.map(time))));
        pairs.push(("note", or_dash(item.resolution_note.as_deref())));
        if let Some(reference) = &item.resolved_provider_ref {
            pairs.push(("provider ref", reference.clone()));
        }
    }
    format!(
        "reconciliation item {} ({status})\n{}",
        item.id,
        key_values(&pairs)
    )
}

/// Items as a list, one line each.
pub fn items_table(items: &[ReconciliationItem], now: DateTime<Utc>) -> String {
    let mut table = Table::new(&[
        "ID",
        "INTENT",
        "TENANT",
        "OPERATION",
        "ACTION",
        "AGE",
        "STATUS",
        "REASON / FINDING",
    ]);
    for item in items {
        let status = match (&item.resolution, &item.resolved_by) {
            (Some(r), Some(by)) => format!("{r} by {by}"),
            _ if item.probe_count > 0 => format!("open, probed {}x", item.probe_count),
            _ => "open".to_owned(),
        };
        let text = item.probe_finding.as_deref().unwrap_or(&item.reason);
        table.row(vec![
            item.id.to_string(),
            item.intent_id.to_string(),
            item.tenant.to_string(),
            item.operation_id.to_string(),
            item.action.to_string(),
            super::table::age(item.opened_at, now),
            status,
            short(text, CELL),
        ]);
    }
    table.render()
}

/// Intents as a list, one line each.
pub fn intents_table(intents: &[IntentRow], now: DateTime<Utc>) -> String {
    let mut table = Table::new(&[
        "ID",
        "TENANT",
        "OPERATION",
        "ACTION",
        "STATE",
        "ATTEMPTS",
        "DEADLINE",
        "UPDATED",
        "REF / LAST ERROR",
    ]);
    for i in intents {
        let detail = i
            .provider_ref
            .as_deref()
            .or(i.last_error.as_deref())
            .unwrap_or("");
        table.row(vec![
            i.id.to_string(),
            i.tenant.to_string(),
            i.operation_id.to_string(),
            i.action.to_string(),
            i.state.as_str().to_owned(),
            i.attempt_count.to_string(),
            or_dash(i.deadline_at.map(time)),
            format!("{} ago", super::table::age(i.updated_at, now)),
            short(detail, CELL),
        ]);
    }
    table.render()
}

/// Audit entries as a list, newest first.
pub fn audit_table(entries: &[AuditEntry]) -> String {
    let mut table = Table::new(&[
        "ID", "AT", "ACTOR", "ACTION", "TENANT", "INTENT", "NOTE", "DETAILS",
    ]);
    for e in entries {
        table.row(vec![
            e.id.to_string(),
            time(e.at),
            e.actor.clone(),
            e.action.clone(),
            or_dash(e.tenant.as_ref()),
            or_dash(e.intent_id),
            short(e.note.as_deref().unwrap_or("-"), CELL),
            e.details.to_string(),
        ]);
    }
    table.render()
}

/// Every line indented by two spaces.
pub fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

#[cfg(test)]
mod tests {
    use crate::intent::{ActionName, IdempotencyKey, IntentId, OperationId, TenantId};
    use chrono::TimeZone;

    use super::*;
    use crate::intent::IntentState;

    fn intent(deadline_at: Option<DateTime<Utc>>) -> IntentRow {
        let at = Utc.with_ymd_and_hms(2030, 1, 1, 12, 0, 0).unwrap();
        IntentRow {
            id: IntentId::new(7),
            tenant: TenantId::parse("acme").unwrap(),
            operation_id: OperationId::parse("op-1").unwrap(),
            action: ActionName::parse("issue_refund").unwrap(),
            payload_version: 1,
            payload: crate::store::StoredPayload::from_value(&serde_json::json!({})),
            payload_sha256: "00".into(),
            idempotency_key: IdempotencyKey::parse("key").unwrap(),
            ordering_key: None,
            state: IntentState::Pending,
            attempt_count: 0,
            ambiguous_attempts: 0,
            first_sent_at: None,
            next_attempt_at: at,
            deadline_at,
            lease_owner: None,
            lease_expires_at: None,
            attempt_started_at: None,
            fencing_token: 0,
            provider_ref: None,
            last_error: None,
            last_http_status: None,
            created_at: at,
            updated_at: at,
            finished_at: None,
        }
    }

    #[test]
    fn show_and_list_name_the_deadline() {
        let now = Utc.with_ymd_and_hms(2030, 1, 1, 12, 0, 0).unwrap();
        let deadline = now + chrono::Duration::minutes(5);
        let block = intent_block(&intent(Some(deadline)), now);
        assert!(
            block.contains("deadline         2030-01-01 12:05:00Z (in 5m)"),
            "{block}"
        );
        let passed = intent_block(
            &intent(Some(deadline)),
            deadline + chrono::Duration::minutes(1),
        );
        assert!(passed.contains("(passed 1m ago)"), "{passed}");
        assert!(!intent_block(&intent(None), now).contains("deadline"));
        let table = intents_table(&[intent(Some(deadline)), intent(None)], now);
        assert!(table.contains("DEADLINE"), "{table}");
        assert!(table.contains("2030-01-01 12:05:00Z"), "{table}");
    }
}
