//! The texts of the dispatcher's statements on SQLite; [`super::claims`] binds and runs
//! them, each batch in one `BEGIN IMMEDIATE` transaction. An outcome batch travels as one
//! JSON array ([`OUTCOMES`] reads it as rows): the attempt rows are written first (from the
//! claims as they stand), then the intents (both fenced by token), then the reconciliation
//! items of those that became unknown.

/// The first tenant with pending intents after `?1` (one probe of
/// `outbox_intents_due_by_tenant`; `tenant` compares bytewise, SQLite's `BINARY`).
pub(super) const NEXT_TENANT_SQL: &str = "SELECT tenant FROM outbox_intents \
    WHERE state = 'pending' AND tenant > ?1 ORDER BY tenant LIMIT 1";

/// The first tenant with pending intents at or after `?1` (an inclusive start).
pub(super) const FIRST_TENANT_AT_SQL: &str = "SELECT tenant FROM outbox_intents \
    WHERE state = 'pending' AND tenant >= ?1 ORDER BY tenant LIMIT 1";

/// Up to `?4` due intents of tenant `?1` and action `?3` in claim order, only heads of
/// ordering chains (a seek in `outbox_intents_due_by_tenant` that stops at the first intent
/// not yet due).
pub(super) const TENANT_DUE_SQL: &str = r#"
SELECT i.next_attempt_at, i.id FROM outbox_intents i
WHERE i.state = 'pending' AND i.tenant = ?1 AND i.action = ?3 AND i.next_attempt_at <= ?2
  AND (i.ordering_key IS NULL OR NOT EXISTS (
        SELECT 1 FROM outbox_intents e
        WHERE e.tenant = i.tenant AND e.ordering_key = i.ordering_key AND e.id < i.id
          AND e.state IN ('pending', 'in_flight', 'unknown')))
ORDER BY i.next_attempt_at, i.id
LIMIT ?4
"#;

/// Marks the chosen intents (`?4`, a JSON array of ids) as in flight.
pub(super) const CLAIM_SQL: &str = r#"
UPDATE outbox_intents
SET state = 'in_flight', lease_owner = ?1, lease_expires_at = ?3 + ?2,
    fencing_token = fencing_token + 1, attempt_count = attempt_count + 1,
    attempt_started_at = ?3, updated_at = ?3
WHERE id IN (SELECT value FROM json_each(?4)) AND state = 'pending'
RETURNING id, tenant, operation_id, action, payload, payload_version, idempotency_key,
          attempt_count, ambiguous_attempts, fencing_token, first_sent_at, created_at,
          deadline_at, budget_attempt_base, budget_started_at, resend_confirmed_attempt,
          next_attempt_at, lease_expires_at
"#;

/// Up to `?2` in-flight intents whose lease expired before `?1`, soonest expired first.
pub(super) const EXPIRED_SQL: &str = "SELECT id FROM outbox_intents \
    WHERE state = 'in_flight' AND lease_expires_at < ?1 ORDER BY lease_expires_at LIMIT ?2";

/// Writes the attempt a lapsed claim had opened (if any) as ambiguous, from the row as it
/// is before the takeover.
pub(super) const CLOSE_EXPIRED_ATTEMPT_SQL: &str = "INSERT INTO outbox_attempts \
    (intent_id, attempt_number, fencing_token, owner, started_at, ended_at, class, error) \
    SELECT id, attempt_count, fencing_token, lease_owner, attempt_started_at, ?2, 'ambiguous', ?3 \
    FROM outbox_intents WHERE id = ?1 AND attempt_started_at IS NOT NULL";

/// Takes the lapsed claim over: counts its open attempt as ambiguous and bumps the token.
pub(super) const TAKE_OVER_SQL: &str = r#"
UPDATE outbox_intents
SET fencing_token = fencing_token + 1, lease_owner = ?2, lease_expires_at = ?3 + ?4,
    ambiguous_attempts = ambiguous_attempts + (attempt_started_at IS NOT NULL),
    first_sent_at = coalesce(first_sent_at, attempt_started_at), attempt_started_at = NULL,
    last_error = ?5, updated_at = ?3
WHERE id = ?1
RETURNING id, tenant, operation_id, action, payload, payload_version, idempotency_key,
          attempt_count, ambiguous_attempts, fencing_token, first_sent_at, created_at,
          deadline_at, budget_attempt_base, budget_started_at, resend_confirmed_attempt,
          next_attempt_at, lease_expires_at
"#;

/// Writes the attempt a release hands back as `not_sent` (fenced), from the claim as it
/// is.
pub(super) const RELEASE_ATTEMPT_SQL: &str = "INSERT INTO outbox_attempts (intent_id, \
    attempt_number, fencing_token, owner, started_at, ended_at, class, error, duration_ms) \
    SELECT id, attempt_count, fencing_token, lease_owner, attempt_started_at, ?3, \
    'not_sent', ?4, 0 FROM outbox_intents \
    WHERE id = ?1 AND fencing_token = ?2 AND state = 'in_flight' \
      AND attempt_started_at IS NOT NULL";

/// Hands the claim back: pending again, due now (fenced).
pub(super) const RELEASE_SQL: &str = "UPDATE outbox_intents SET state = 'pending', \
    lease_owner = NULL, lease_expires_at = NULL, attempt_started_at = NULL, \
    next_attempt_at = ?3, updated_at = ?3 \
    WHERE id = ?1 AND fencing_token = ?2 AND state = 'in_flight'";

/// The batch as rows, for every statement below. Each outcome is a JSON array whose
/// positions are the columns below, in [`super::claims`]' `outcome_json` order. Each element
/// is rendered as JSON text once (the materialised `e`) and its fields are read from that
/// text, which SQLite parses once and keeps; reading `json_each`'s `value` for each field
/// instead renders the element again every time (decision 0017).
pub(super) const OUTCOMES: &str = "WITH e(v) AS MATERIALIZED (SELECT value FROM json_each(?1)) \
    SELECT v ->> 0 AS id, v ->> 1 AS token, v ->> 2 AS state, v ->> 3 AS next_at, \
    v ->> 4 AS provider_ref, v ->> 5 AS error, v ->> 6 AS http_status, v ->> 7 AS ambiguous, \
    v ->> 8 AS sent_at, v ->> 9 AS class, v ->> 10 AS duration_ms, \
    v ->> 11 AS attempt_started FROM e";

/// Applies each outcome only while the intent is in flight under the same fencing token;
/// returns the ids that applied.
pub(super) fn record_intents_sql() -> String {
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
pub(super) fn record_attempts_sql() -> String {
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

/// Opens a reconciliation item for each outcome that applied (`?3`, a JSON array of ids)
/// and made its intent unknown, unless one is open already.
pub(super) fn open_items_sql() -> String {
    format!(
        "INSERT INTO outbox_reconciliation_items (intent_id, tenant, reason, opened_at) \
         SELECT i.id, i.tenant, coalesce(o.error, 'outcome unknown'), ?2 \
         FROM ({OUTCOMES}) AS o JOIN outbox_intents AS i ON i.id = o.id \
         WHERE o.state = 'unknown' AND o.id IN (SELECT value FROM json_each(?3)) \
         ON CONFLICT (intent_id) WHERE resolved_at IS NULL DO NOTHING"
    )
}
