//! The texts of the dispatcher's hot-path statements on PostgreSQL, each a data-modifying
//! CTE that runs as one statement in its own short transaction; [`super::claims`] binds
//! and runs them.
//!
//! A call whose built-in does not fit its arguments exactly (the polymorphic `unnest`,
//! `make_interval` with a named argument, a division by an integer) names `pg_catalog` or
//! casts the arguments to the built-in's types: PostgreSQL picks the closest fit wherever
//! it sits on the search_path, so a function or operator created in a schema the daemon
//! searches would otherwise run inside the claim. The multi-column `unnest(…)` in `FROM`
//! needs no name: PostgreSQL expands it into `pg_catalog.unnest` calls itself
//! (`functions_planted_in_the_schema_never_run_in_the_dispatchers_statements`).

/// The settings under which the statements kept prepared on their generic plans run, the
/// claim (decision 0021) and the outcome group (decision 0022):
///
/// - `plan_cache_mode = force_generic_plan`: the prepared statement is planned once per
///   connection (and again after an `ANALYZE` or a schema change), not on every execution,
///   which cost the server more than executing a small claim or outcome group;
/// - `enable_seqscan = off`: a generic plan made while the table is empty or has no
///   statistics reads the indexes, not the whole table, and keeps doing so as the table
///   grows;
/// - `jit = off`: a generic plan's estimated cost (its limits and array lengths are
///   unknown when it is made) can be far above `jit_above_cost`, and compiling it would
///   cost more than running it.
///
/// All three are user-settable, so any role may set them. The dispatcher's own sessions
/// for these statements set them for the whole session
/// ([`DispatcherSessions`](super::DispatcherSessions), decisions 0023 and 0024);
/// any other store sets them for one transaction ([`KEPT_PLAN_BEGIN_SQL`]).
pub(crate) const KEPT_PLAN_SETTINGS: [(&str, &str); 3] = [
    ("plan_cache_mode", "force_generic_plan"),
    ("enable_seqscan", "off"),
    ("jit", "off"),
];

/// Opens a transaction with [`KEPT_PLAN_SETTINGS`] set for it alone, in one simple-query
/// round trip.
pub(super) static KEPT_PLAN_BEGIN_SQL: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| {
        KEPT_PLAN_SETTINGS
            .iter()
            .fold(String::from("BEGIN"), |sql, (name, value)| {
                sql + &format!("; SET LOCAL {name} = {value}")
            })
    });

/// The claim statement.
///
/// Claims up to `limit` ($3) due intents, sharing them between tenants as
/// [`FairShare`](crate::store::FairShare) says: `after_turn` and `from_start` walk the tenants with pending intents
/// in bytewise name order (`COLLATE "C"`, the order of Rust's `str` that
/// [`crate::dispatch::fairness::TenantTurns`] uses, whatever the database's collation; one
/// index probe per tenant, a loose index scan of `outbox_intents_due_by_tenant_bytewise`, whose
/// `tenant` key is in the "C" collation, migration 0005), starting at `$6` when `$8` is
/// true (an inclusive bound: [`FairShare::start_bound`](crate::store::FairShare::start_bound)) or after it, and wrapping
/// around; for each, a
/// `LATERAL` seek per action takes at most `$7` of its due intents in order (a claim for
/// one provider never reads another provider's backlog), and the first `$7` of those in
/// order are taken (the others stay locked only until the claim's transaction commits). The
/// walk is evaluated only as far as the outer `LIMIT` needs. `FOR UPDATE SKIP LOCKED` lets
/// replicas claim disjoint sets; only the head of each ordering chain is eligible. The
/// statement runs as a transaction of its own (on one of the dispatcher's kept sessions, or
/// opened by [`KEPT_PLAN_BEGIN_SQL`]) that commits before the claim returns, so the claim is
/// durable before any request is sent.
/// On error, nothing is claimed, including when the server cancels it at its deadline
/// (`statement_timeout`, half the lease:
/// [`claim_statement_timeout`](super::claims::claim_statement_timeout)); a claim dropped
/// after it was sent may still commit (on a dispatcher's session the statement is its own
/// transaction), so callers never drop it: one the dispatcher stops waiting for goes on,
/// and what it claimed is handed back. The `UPDATE`
/// finds the locked rows by primary key through an array of their ids, a shape that no plan
/// can turn into a join over a scan of the table: the statement is kept prepared and runs
/// on a generic plan (see [`KEPT_PLAN_SETTINGS`]). The lease runs from the database's clock
/// (`now()`, the start of the claim's own transaction, so after any wait for a pool
/// connection), never from
/// the replica's; the statement returns that clock reading as `claimed_at`. Due-ness
/// (`$1`) is judged with the replica's clock, which planned `next_attempt_at`. The payload
/// is returned as text, which [`PayloadBody::from_stored`](crate::store::PayloadBody::from_stored)
/// turns into the body on both backends (no row can fail the decoding of its batch).
pub(super) const CLAIM_DUE_SQL: &str = r#"
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
        SELECT c.id FROM pg_catalog.unnest($2::text[]) AS a(action) CROSS JOIN LATERAL (
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
        lease_expires_at = now() + pg_catalog.make_interval(secs => $5::double precision / 1000::double precision),
        fencing_token = i.fencing_token + 1, attempt_count = i.attempt_count + 1,
        attempt_started_at = now(), updated_at = now()
    WHERE i.id = ANY(ARRAY(SELECT id FROM due))
    RETURNING i.*
)
SELECT id, tenant, operation_id, action, payload::text AS payload, payload_version,
       idempotency_key, attempt_count, ambiguous_attempts, fencing_token, first_sent_at,
       created_at, deadline_at, budget_attempt_base, budget_started_at, resend_confirmed_attempt,
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
pub(super) const RECLAIM_EXPIRED_SQL: &str = r#"
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
        lease_expires_at = now() + pg_catalog.make_interval(secs => $3::double precision / 1000::double precision),
        ambiguous_attempts = i.ambiguous_attempts + (i.attempt_started_at IS NOT NULL)::int,
        first_sent_at = coalesce(i.first_sent_at, i.attempt_started_at),
        attempt_started_at = NULL, last_error = $4, updated_at = now()
    FROM expired WHERE i.id = expired.id
    RETURNING i.*
)
SELECT id, tenant, operation_id, action, payload::text AS payload, payload_version,
       idempotency_key, attempt_count, ambiguous_attempts, fencing_token, first_sent_at,
       created_at, deadline_at,
       budget_attempt_base, budget_started_at, resend_confirmed_attempt, next_attempt_at,
       lease_expires_at, now() AS claimed_at
FROM taken ORDER BY id
"#;

/// Records a batch of outcomes in one statement. Each row applies only while the intent is
/// in flight under the same fencing token; for rows that applied, the attempt row is written
/// (once, now that it ended) and the reconciliation item opened. Returns the ids that
/// applied. Kept prepared and run on its generic plan under [`KEPT_PLAN_SETTINGS`]
/// (decision 0022): every join to `outbox_intents` is by primary key, so with sequential
/// scans off no plan of it scans the table. A generic plan cannot know the arrays' length
/// (it assumes a few rows), so `att` and `rec` take the outcome's columns from `upd`'s
/// `RETURNING`, not by joining `o` again: a nested loop over two of these CTEs costs the
/// square of the group's size, 1,000 outcomes about ten times the linear shape
/// (`a_large_outcome_group_is_written_in_linear_work`). `att` reads the claim's attempt
/// number, owner and start from the statement's snapshot, as it was before `upd`: that is the claim's own row, because the claim
/// committed before this statement began, every later claim or takeover bumps the token,
/// and `upd` applies only under the same token.
pub(super) const RECORD_OUTCOMES_SQL: &str = r#"
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
    RETURNING i.id, i.tenant, o.state AS o_state, o.error AS o_error, o.class AS o_class,
              o.http_status AS o_http_status, o.provider_ref AS o_provider_ref,
              o.duration_ms AS o_duration_ms, o.attempt_started AS o_attempt_started
), att AS (
    INSERT INTO outbox_attempts (intent_id, attempt_number, fencing_token, owner, started_at,
                                 ended_at, class, http_status, error, provider_ref, duration_ms)
    SELECT i.id, i.attempt_count, i.fencing_token, i.lease_owner,
           coalesce(u.o_attempt_started, i.attempt_started_at), $12, u.o_class, u.o_http_status,
           u.o_error, u.o_provider_ref, u.o_duration_ms
    FROM upd u JOIN outbox_intents i ON i.id = u.id
    WHERE u.o_class IS NOT NULL AND i.attempt_started_at IS NOT NULL
), rec AS (
    INSERT INTO outbox_reconciliation_items (intent_id, tenant, reason, opened_at)
    SELECT u.id, u.tenant, coalesce(u.o_error, 'outcome unknown'), $12
    FROM upd u
    WHERE u.o_state = 'unknown'
    ON CONFLICT (intent_id) WHERE resolved_at IS NULL DO NOTHING
    RETURNING id
)
SELECT id FROM upd
"#;

/// Hands unsent claims back: pending again, the opened attempt written as `not_sent`.
pub(super) const RELEASE_SQL: &str = r#"
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
