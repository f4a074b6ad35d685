//! The dispatcher's hot path on PostgreSQL. Each function is one statement (a data-
//! modifying CTE) in its own short transaction; none is held across an HTTP call.
//!
//! The statements that join `outbox_intents` to a list of ids (outcomes, takeovers,
//! releases) are sent unnamed (`persistent(false)`), so PostgreSQL plans each execution for
//! the table as it is now. A prepared statement is planned for its first executions and may
//! then settle on a cached generic plan: made while the table was nearly empty, that plan
//! joins it by sequential scan, and keeps doing so as the table grows until the next ANALYZE
//! (in the benchmark, a millisecond of database CPU per intent at 1,000 intents/s on a fresh
//! table; test `outcome_write_does_not_scan_a_table_that_grew`). The price is one more round
//! trip (sqlx describes an unnamed statement before executing it) and a plan per execution,
//! per batch of up to `batch_size` outcomes. sqlx looks its statement cache up by SQL text
//! first, so these texts must not also be run as cached statements on the same connection.
//! The claim keeps its prepared statement: it reads the due index in order either way.

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::types::Json;
use sqlx::{PgPool, Row};

use crate::intent::{ActionName, IdempotencyKey, IntentId, OperationId, TenantId};
use crate::store::{
    lease_millis, ClaimRequest, ClaimedIntent, FairShare, OutcomeRecord, RecordResult, Release,
    StoreError, Transition, LEASE_EXPIRED_ERROR,
};

/// The claim statement.
///
/// Claims up to `limit` ($3) due intents, sharing them between tenants as
/// [`FairShare`] says: `after_turn` and `from_start` walk the tenants with pending intents
/// in bytewise name order (`COLLATE "C"`, the order of Rust's `str` that
/// [`crate::dispatch::fairness::TenantTurns`] uses, whatever the database's collation; one
/// index probe per tenant, a loose index scan of `outbox_intents_due_by_tenant_bytewise`, whose
/// `tenant` key is in the "C" collation, migration 0005), starting at `$6` when `$8` is
/// true (an inclusive bound: [`FairShare::start_bound`]) or after it, and wrapping
/// around; for each, a
/// `LATERAL` seek per action takes at most `$7` of its due intents in order (a claim for
/// one provider never reads another provider's backlog), and the first `$7` of those in
/// order are taken (the others stay locked only until this statement commits). The walk is evaluated
/// only as far as the outer `LIMIT` needs. `FOR UPDATE SKIP LOCKED` lets replicas claim
/// disjoint sets; only the head of each ordering chain is eligible. The statement commits
/// on its own (autocommit), so the claim is durable before any request is sent. On error
/// nothing is claimed. The lease runs from the database's clock (`now()`, the start of
/// this statement's own transaction, so after any wait for a pool connection), never from
/// the replica's; the statement returns that clock reading as `claimed_at`. Due-ness
/// (`$1`) is judged with the replica's clock, which planned `next_attempt_at`.
const CLAIM_DUE_SQL: &str = r#"
WITH RECURSIVE after_turn(tenant) AS (
    SELECT CASE WHEN $8::boolean
        THEN (SELECT min(tenant COLLATE "C") FROM outbox_intents
              WHERE state = 'pending' AND tenant COLLATE "C" >= $6)
        ELSE (SELECT min(tenant COLLATE "C") FROM outbox_intents
              WHERE state = 'pending' AND tenant COLLATE "C" > $6)
    END
  UNION ALL
    SELECT (SELECT min(n.tenant COLLATE "C") FROM outbox_intents n
            WHERE n.state = 'pending' AND n.tenant COLLATE "C" > a.tenant)
    FROM after_turn a WHERE a.tenant IS NOT NULL
), from_start(tenant) AS (
    SELECT min(tenant COLLATE "C") FROM outbox_intents WHERE state = 'pending' AND $6 <> ''
  UNION ALL
    SELECT (SELECT min(n.tenant COLLATE "C") FROM outbox_intents n
            WHERE n.state = 'pending' AND n.tenant COLLATE "C" > f.tenant)
    FROM from_start f WHERE f.tenant IS NOT NULL AND f.tenant < $6 COLLATE "C"
), turns AS (
    SELECT tenant FROM after_turn WHERE tenant IS NOT NULL
    UNION ALL
    SELECT tenant FROM from_start
    WHERE tenant IS NOT NULL
      AND (tenant < $6 COLLATE "C" OR (tenant = $6 COLLATE "C" AND NOT $8::boolean))
), due AS (
    SELECT d.id FROM turns t CROSS JOIN LATERAL (
        SELECT c.id FROM unnest($2::text[]) AS a(action) CROSS JOIN LATERAL (
            SELECT i.id, i.next_attempt_at FROM outbox_intents i
            WHERE i.state = 'pending' AND i.tenant COLLATE "C" = t.tenant
              AND i.action = a.action
              AND i.next_attempt_at <= $1
              AND (i.ordering_key IS NULL OR NOT EXISTS (
                    SELECT 1 FROM outbox_intents e
                    WHERE e.tenant = i.tenant AND e.ordering_key = i.ordering_key
                      AND e.id < i.id AND e.state IN ('pending', 'in_flight', 'unknown')))
            ORDER BY i.next_attempt_at, i.id
            LIMIT $7
            FOR UPDATE SKIP LOCKED
        ) c
        ORDER BY c.next_attempt_at, c.id
        LIMIT $7
    ) d
    LIMIT $3
), claimed AS (
    UPDATE outbox_intents i
    SET state = 'in_flight', lease_owner = $4,
        lease_expires_at = now() + make_interval(secs => $5::double precision / 1000),
        fencing_token = i.fencing_token + 1, attempt_count = i.attempt_count + 1,
        attempt_started_at = now(), updated_at = now()
    FROM due WHERE i.id = due.id
    RETURNING i.*
)
SELECT id, tenant, operation_id, action, payload, payload_version, idempotency_key,
       attempt_count, ambiguous_attempts, fencing_token, first_sent_at, created_at,
       deadline_at, budget_attempt_base, budget_started_at, resend_confirmed_attempt,
       next_attempt_at, lease_expires_at, now() AS claimed_at
FROM claimed
ORDER BY next_attempt_at, id
"#;

/// Takes over in-flight intents whose lease expired by the database's clock: writes the open attempt (if the claim
/// opened one) as ambiguous, counts it, sets `first_sent_at`, and bumps the fencing token so
/// the old owner can no longer record anything. The takeover itself opens no attempt.
/// `closed` takes the attempt from `expired`, which returns the row version it locked (the
/// newest), not the statement's snapshot: another replica may have taken the row over, or
/// recorded and re-claimed it, after the snapshot was taken.
const RECLAIM_EXPIRED_SQL: &str = r#"
WITH expired AS (
    SELECT id, attempt_count, fencing_token, lease_owner, attempt_started_at
    FROM outbox_intents
    WHERE state = 'in_flight' AND lease_expires_at < now()
    ORDER BY lease_expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), closed AS (
    INSERT INTO outbox_attempts (intent_id, attempt_number, fencing_token, owner, started_at,
                                 ended_at, class, error)
    SELECT e.id, e.attempt_count, e.fencing_token, e.lease_owner, e.attempt_started_at, now(),
           'ambiguous', $4
    FROM expired e
    WHERE e.attempt_started_at IS NOT NULL
), taken AS (
    UPDATE outbox_intents i
    SET fencing_token = i.fencing_token + 1, lease_owner = $2,
        lease_expires_at = now() + make_interval(secs => $3::double precision / 1000),
        ambiguous_attempts = i.ambiguous_attempts + (i.attempt_started_at IS NOT NULL)::int,
        first_sent_at = coalesce(i.first_sent_at, i.attempt_started_at),
        attempt_started_at = NULL, last_error = $4, updated_at = now()
    FROM expired WHERE i.id = expired.id
    RETURNING i.*
)
SELECT id, tenant, operation_id, action, payload, payload_version, idempotency_key,
       attempt_count, ambiguous_attempts, fencing_token, first_sent_at, created_at, deadline_at,
       budget_attempt_base, budget_started_at, resend_confirmed_attempt, next_attempt_at,
       lease_expires_at, now() AS claimed_at
FROM taken ORDER BY id
"#;

/// Records a batch of outcomes in one statement. Each row applies only while the intent is
/// in flight under the same fencing token; for rows that applied, the attempt row is written
/// (once, now that it ended) and the reconciliation item opened. Returns the ids that
/// applied. `att` reads the claim's attempt number, owner and start from the statement's
/// snapshot, as it was before `upd`: that is the claim's own row, because the claim
/// committed before this statement began, every later claim or takeover bumps the token,
/// and `upd` applies only under the same token.
const RECORD_OUTCOMES_SQL: &str = r#"
WITH o AS (
    SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::timestamptz[], $5::text[],
                         $6::text[], $7::int[], $8::int[], $9::timestamptz[],
                         $10::text[], $11::bigint[], $13::timestamptz[])
        AS o(intent_id, token, state, next_at, provider_ref, error, http_status, ambiguous,
             sent_at, class, duration_ms, attempt_started)
), upd AS (
    UPDATE outbox_intents i
    SET state = o.state,
        next_attempt_at = coalesce(o.next_at, i.next_attempt_at),
        lease_owner = NULL, lease_expires_at = NULL, attempt_started_at = NULL,
        provider_ref = coalesce(o.provider_ref, i.provider_ref),
        last_error = coalesce(o.error, i.last_error),
        last_http_status = coalesce(o.http_status, i.last_http_status),
        ambiguous_attempts = i.ambiguous_attempts + o.ambiguous,
        first_sent_at = coalesce(i.first_sent_at, o.sent_at),
        finished_at = CASE WHEN o.state IN ('delivered', 'failed') THEN $12 ELSE NULL END,
        updated_at = $12
    FROM o
    WHERE i.id = o.intent_id AND i.fencing_token = o.token AND i.state = 'in_flight'
    RETURNING i.id, i.tenant
), att AS (
    INSERT INTO outbox_attempts (intent_id, attempt_number, fencing_token, owner, started_at,
                                 ended_at, class, http_status, error, provider_ref, duration_ms)
    SELECT i.id, i.attempt_count, i.fencing_token, i.lease_owner,
           coalesce(o.attempt_started, i.attempt_started_at), $12, o.class, o.http_status,
           o.error, o.provider_ref, o.duration_ms
    FROM o JOIN upd ON upd.id = o.intent_id JOIN outbox_intents i ON i.id = o.intent_id
    WHERE o.class IS NOT NULL AND i.attempt_started_at IS NOT NULL
), rec AS (
    INSERT INTO outbox_reconciliation_items (intent_id, tenant, reason, opened_at)
    SELECT upd.id, upd.tenant, coalesce(o.error, 'outcome unknown'), $12
    FROM upd JOIN o ON o.intent_id = upd.id
    WHERE o.state = 'unknown'
    ON CONFLICT (intent_id) WHERE resolved_at IS NULL DO NOTHING
    RETURNING id
)
SELECT id FROM upd
"#;

/// Hands unsent claims back: pending again, the opened attempt written as `not_sent`.
const RELEASE_SQL: &str = r#"
WITH r AS (
    SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[]) AS r(intent_id, token, reason)
), upd AS (
    UPDATE outbox_intents i
    SET state = 'pending', lease_owner = NULL, lease_expires_at = NULL,
        attempt_started_at = NULL, updated_at = $4, next_attempt_at = $4
    FROM r WHERE i.id = r.intent_id AND i.fencing_token = r.token AND i.state = 'in_flight'
    RETURNING i.id
)
INSERT INTO outbox_attempts (intent_id, attempt_number, fencing_token, owner, started_at,
                             ended_at, class, error, duration_ms)
SELECT i.id, i.attempt_count, i.fencing_token, i.lease_owner, i.attempt_started_at, $4,
       'not_sent', r.reason, 0
FROM r JOIN upd ON upd.id = r.intent_id JOIN outbox_intents i ON i.id = r.intent_id
WHERE i.attempt_started_at IS NOT NULL
"#;

fn claimed_from_row(row: &PgRow) -> Result<ClaimedIntent, StoreError> {
    let payload: Json<serde_json::Value> = row.try_get("payload")?;
    Ok(ClaimedIntent {
        id: row.try_get("id")?,
        tenant: TenantId::from_store(row.try_get("tenant")?),
        operation_id: OperationId::from_store(row.try_get("operation_id")?),
        action: ActionName::from_store(row.try_get("action")?),
        payload: payload.0,
        payload_version: row.try_get("payload_version")?,
        idempotency_key: IdempotencyKey::from_store(row.try_get("idempotency_key")?),
        attempt_count: row.try_get("attempt_count")?,
        ambiguous_attempts: row.try_get("ambiguous_attempts")?,
        fencing_token: row.try_get("fencing_token")?,
        first_sent_at: row.try_get("first_sent_at")?,
        created_at: row.try_get("created_at")?,
        deadline_at: row.try_get("deadline_at")?,
        budget_attempt_base: row.try_get("budget_attempt_base")?,
        budget_started_at: row.try_get("budget_started_at")?,
        resend_confirmed_attempt: row.try_get("resend_confirmed_attempt")?,
        next_attempt_at: row.try_get("next_attempt_at")?,
        lease_expires_at: row.try_get("lease_expires_at")?,
        claimed_at: row.try_get("claimed_at")?,
    })
}

pub(super) async fn claim_due(
    pool: &PgPool,
    req: &ClaimRequest,
    share: &FairShare,
) -> Result<Vec<ClaimedIntent>, StoreError> {
    let (start, inclusive) = share.start_bound();
    let rows = sqlx::query(CLAIM_DUE_SQL)
        .bind(req.now)
        .bind(&req.actions)
        .bind(i64::from(req.limit))
        .bind(&req.owner)
        .bind(lease_millis(req))
        .bind(start)
        .bind(i64::from(share.per_tenant.max(1)))
        .bind(inclusive)
        .fetch_all(pool)
        .await?;
    rows.iter().map(claimed_from_row).collect()
}

pub(super) async fn reclaim_expired(
    pool: &PgPool,
    req: &ClaimRequest,
) -> Result<Vec<ClaimedIntent>, StoreError> {
    let rows = sqlx::query(RECLAIM_EXPIRED_SQL)
        .persistent(false)
        .bind(i64::from(req.limit))
        .bind(&req.owner)
        .bind(lease_millis(req))
        .bind(LEASE_EXPIRED_ERROR)
        .fetch_all(pool)
        .await?;
    rows.iter().map(claimed_from_row).collect()
}

/// Column arrays for [`RECORD_OUTCOMES_SQL`].
#[derive(Default)]
struct OutcomeColumns {
    intent_id: Vec<IntentId>,
    token: Vec<i64>,
    state: Vec<&'static str>,
    next_at: Vec<Option<DateTime<Utc>>>,
    provider_ref: Vec<Option<String>>,
    error: Vec<Option<String>>,
    http_status: Vec<Option<i32>>,
    ambiguous: Vec<i32>,
    sent_at: Vec<Option<DateTime<Utc>>>,
    class: Vec<Option<&'static str>>,
    duration_ms: Vec<Option<i64>>,
    attempt_started: Vec<Option<DateTime<Utc>>>,
}

impl OutcomeColumns {
    fn push(&mut self, o: &OutcomeRecord) {
        let (next_at, provider_ref, reason) = match &o.transition {
            Transition::Delivered { provider_ref } => (None, provider_ref.clone(), None),
            Transition::RetryAt { at } => (Some(*at), None, None),
            Transition::Failed { reason } | Transition::Unknown { reason } => {
                (None, None, Some(reason.clone()))
            }
        };
        let attempt = o.attempt.as_ref();
        self.intent_id.push(o.intent_id);
        self.token.push(o.fencing_token);
        self.state.push(o.transition.state().as_str());
        self.next_at.push(next_at);
        self.provider_ref
            .push(provider_ref.or_else(|| attempt.and_then(|a| a.provider_ref.clone())));
        self.error
            .push(reason.or_else(|| attempt.and_then(|a| a.error.clone())));
        self.http_status
            .push(attempt.and_then(|a| a.http_status).map(i32::from));
        self.ambiguous
            .push(i32::from(attempt.is_some_and(|a| a.class.is_ambiguous())));
        self.sent_at.push(
            attempt
                .filter(|a| a.class != crate::action::AttemptClass::NotSent)
                .map(|a| a.started_at),
        );
        self.class.push(attempt.map(|a| a.class.as_str()));
        self.attempt_started.push(attempt.map(|a| a.started_at));
        self.duration_ms
            .push(attempt.map(|a| i64::try_from(a.duration.as_millis()).unwrap_or(i64::MAX)));
    }
}

pub(super) async fn record_outcomes(
    pool: &PgPool,
    outcomes: &[OutcomeRecord],
) -> Result<Vec<RecordResult>, StoreError> {
    let Some(first) = outcomes.first() else {
        return Ok(Vec::new());
    };
    let mut cols = OutcomeColumns::default();
    outcomes.iter().for_each(|o| cols.push(o));
    // Planned on every execution (see the module documentation).
    let applied: Vec<IntentId> = sqlx::query_scalar(RECORD_OUTCOMES_SQL)
        .persistent(false)
        .bind(&cols.intent_id)
        .bind(&cols.token)
        .bind(&cols.state)
        .bind(&cols.next_at)
        .bind(&cols.provider_ref)
        .bind(&cols.error)
        .bind(&cols.http_status)
        .bind(&cols.ambiguous)
        .bind(&cols.sent_at)
        .bind(&cols.class)
        .bind(&cols.duration_ms)
        .bind(first.now)
        .bind(&cols.attempt_started)
        .fetch_all(pool)
        .await?;
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

pub(super) async fn release_claims(
    pool: &PgPool,
    releases: &[Release],
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    if releases.is_empty() {
        return Ok(());
    }
    let ids: Vec<IntentId> = releases.iter().map(|r| r.intent_id).collect();
    let tokens: Vec<i64> = releases.iter().map(|r| r.fencing_token).collect();
    let reasons: Vec<&str> = releases.iter().map(|r| r.reason.as_str()).collect();
    sqlx::query(RELEASE_SQL)
        .persistent(false)
        .bind(&ids)
        .bind(&tokens)
        .bind(&reasons)
        .bind(now)
        .execute(pool)
        .await?;
    Ok(())
}
