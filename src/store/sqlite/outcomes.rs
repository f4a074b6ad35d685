//! Recording a batch of outcomes on SQLite in one `BEGIN IMMEDIATE` transaction of three
//! statements: the attempt rows (written once, now that they ended, from the claims as they
//! stand), the intents (both fenced by token), and the reconciliation items of those that
//! became unknown. The batch travels as one JSON array.

use serde_json::json;
use sqlx::AssertSqlSafe;
use sqlx::SqlitePool;

use super::ms;
use crate::action::AttemptClass;
use crate::intent::IntentId;
use crate::store::{OutcomeRecord, RecordResult, StoreError, Transition};

/// The batch as rows, for every statement below.
const OUTCOMES: &str = "SELECT value ->> '$.id' AS id, value ->> '$.token' AS token, \
    value ->> '$.state' AS state, value ->> '$.next_at' AS next_at, \
    value ->> '$.provider_ref' AS provider_ref, value ->> '$.error' AS error, \
    value ->> '$.http_status' AS http_status, value ->> '$.ambiguous' AS ambiguous, \
    value ->> '$.sent_at' AS sent_at, \
    value ->> '$.class' AS class, value ->> '$.duration_ms' AS duration_ms, \
    value ->> '$.attempt_started' AS attempt_started FROM json_each(?1)";

/// Applies each outcome only while the intent is in flight under the same fencing token;
/// returns the ids that applied.
fn record_intents_sql() -> String {
    format!(
        "UPDATE outbox_intents AS i SET state = o.state, \
         next_attempt_at = coalesce(o.next_at, i.next_attempt_at), \
         lease_owner = NULL, lease_expires_at = NULL, attempt_started_at = NULL, \
         provider_ref = coalesce(o.provider_ref, i.provider_ref), \
         last_error = coalesce(o.error, i.last_error), \
         last_http_status = coalesce(o.http_status, i.last_http_status), \
         ambiguous_attempts = i.ambiguous_attempts + o.ambiguous, \
         first_sent_at = coalesce(i.first_sent_at, o.sent_at), \
         finished_at = CASE WHEN o.state IN ('delivered', 'failed') THEN ?2 ELSE NULL END, \
         updated_at = ?2 \
         FROM ({OUTCOMES}) AS o \
         WHERE i.id = o.id AND i.fencing_token = o.token AND i.state = 'in_flight' \
         RETURNING id"
    )
}

/// Writes the attempt each applicable outcome ends (before the intents move on, so the
/// claim's attempt number, owner and start are still there).
fn record_attempts_sql() -> String {
    format!(
        "INSERT INTO outbox_attempts (intent_id, attempt_number, fencing_token, owner, \
         started_at, ended_at, class, http_status, error, provider_ref, duration_ms) \
         SELECT i.id, i.attempt_count, i.fencing_token, i.lease_owner, \
         coalesce(o.attempt_started, i.attempt_started_at), ?2, o.class, o.http_status, \
         o.error, o.provider_ref, o.duration_ms \
         FROM ({OUTCOMES}) AS o JOIN outbox_intents AS i ON i.id = o.id \
         WHERE i.fencing_token = o.token AND i.state = 'in_flight' \
           AND o.class IS NOT NULL AND i.attempt_started_at IS NOT NULL"
    )
}

fn open_items_sql() -> String {
    format!(
        "INSERT INTO outbox_reconciliation_items (intent_id, tenant, reason, opened_at) \
         SELECT i.id, i.tenant, coalesce(o.error, 'outcome unknown'), ?2 \
         FROM ({OUTCOMES}) AS o JOIN outbox_intents AS i ON i.id = o.id \
         WHERE o.state = 'unknown' AND o.id IN (SELECT value FROM json_each(?3)) \
         ON CONFLICT (intent_id) WHERE resolved_at IS NULL DO NOTHING"
    )
}

/// One outcome as a JSON object for [`OUTCOMES`].
fn outcome_json(o: &OutcomeRecord) -> serde_json::Value {
    let (next_at, provider_ref, reason) = match &o.transition {
        Transition::Delivered { provider_ref } => (None, provider_ref.clone(), None),
        Transition::RetryAt { at } => (Some(ms(*at)), None, None),
        Transition::Failed { reason } | Transition::Unknown { reason } => {
            (None, None, Some(reason.clone()))
        }
    };
    let a = o.attempt.as_ref();
    json!({
        "id": o.intent_id,
        "token": o.fencing_token,
        "state": o.transition.state().as_str(),
        "next_at": next_at,
        "provider_ref": provider_ref.or_else(|| a.and_then(|a| a.provider_ref.clone())),
        "error": reason.or_else(|| a.and_then(|a| a.error.clone())),
        "http_status": a.and_then(|a| a.http_status),
        "ambiguous": i32::from(a.is_some_and(|a| a.class.is_ambiguous())),
        "sent_at": a.filter(|a| a.class != AttemptClass::NotSent).map(|a| ms(a.started_at)),
        "class": a.map(|a| a.class.as_str()),
        "duration_ms": a.map(|a| i64::try_from(a.duration.as_millis()).unwrap_or(i64::MAX)),
        "attempt_started": a.map(|a| ms(a.started_at)),
    })
}

pub(super) async fn record_outcomes(
    pool: &SqlitePool,
    outcomes: &[OutcomeRecord],
) -> Result<Vec<RecordResult>, StoreError> {
    let Some(first) = outcomes.first() else {
        return Ok(Vec::new());
    };
    let batch = serde_json::Value::Array(outcomes.iter().map(outcome_json).collect()).to_string();
    let now = ms(first.now);
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    if outcomes.iter().any(|o| o.attempt.is_some()) {
        sqlx::query(AssertSqlSafe(record_attempts_sql()))
            .bind(&batch)
            .bind(now)
            .execute(&mut *tx)
            .await?;
    }
    let applied: Vec<IntentId> = sqlx::query_scalar(AssertSqlSafe(record_intents_sql()))
        .bind(&batch)
        .bind(now)
        .fetch_all(&mut *tx)
        .await?;
    if !applied.is_empty()
        && outcomes
            .iter()
            .any(|o| matches!(o.transition, Transition::Unknown { .. }))
    {
        let applied_json = serde_json::to_string(&applied).unwrap_or_else(|_| "[]".into());
        sqlx::query(AssertSqlSafe(open_items_sql()))
            .bind(&batch)
            .bind(now)
            .bind(&applied_json)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(outcomes
        .iter()
        .map(|o| {
            if applied.contains(&o.intent_id) {
                RecordResult::Recorded
            } else {
                RecordResult::Fenced
            }
        })
        .collect())
}
