-- outboxd schema, SQLite. Forward-only; paired with migrations/postgres/0001_outbox.sql.
-- Times are INTEGER milliseconds since the Unix epoch (UTC). Payloads are JSON text.
-- SQLite has no sha256: producers on SQLite record intents with the Rust `enqueue`
-- (or the admin API), which fills in the digest and the idempotency key.

CREATE TABLE outbox_intents (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant             TEXT NOT NULL CHECK (length(tenant) BETWEEN 1 AND 128),
    operation_id       TEXT NOT NULL CHECK (length(operation_id) BETWEEN 1 AND 200),
    action             TEXT NOT NULL CHECK (length(action) BETWEEN 1 AND 128),
    payload_version    INTEGER NOT NULL DEFAULT 1 CHECK (payload_version BETWEEN 1 AND 1000000),
    payload            TEXT NOT NULL CHECK (json_valid(payload) AND json_type(payload) = 'object'),
    payload_sha256     TEXT NOT NULL CHECK (length(payload_sha256) = 64),
    idempotency_key    TEXT NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    ordering_key       TEXT CHECK (length(ordering_key) BETWEEN 1 AND 255),
    state              TEXT NOT NULL DEFAULT 'pending' CHECK (state IN
                         ('pending', 'in_flight', 'delivered', 'failed', 'unknown', 'cancelled', 'abandoned')),
    attempt_count      INTEGER NOT NULL DEFAULT 0,
    ambiguous_attempts INTEGER NOT NULL DEFAULT 0,
    next_attempt_at    INTEGER NOT NULL,
    deadline_at        INTEGER,
    lease_owner        TEXT,
    lease_expires_at   INTEGER,
    -- When the attempt this in-flight claim opened began; NULL when none is open (not in
    -- flight, or a takeover after lease expiry). Its attempt row is written once, when it ends.
    attempt_started_at INTEGER,
    fencing_token      INTEGER NOT NULL DEFAULT 0,
    budget_attempt_base INTEGER NOT NULL DEFAULT 0,
    budget_started_at  INTEGER,
    first_sent_at      INTEGER,
    provider_ref       TEXT,
    last_error         TEXT,
    last_http_status   INTEGER,
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    finished_at        INTEGER,
    CONSTRAINT outbox_intents_operation UNIQUE (tenant, operation_id),
    -- A lease exists exactly while the intent is in flight.
    CONSTRAINT outbox_intents_lease CHECK ((state = 'in_flight') = (lease_expires_at IS NOT NULL)),
    CONSTRAINT outbox_intents_open_attempt CHECK (attempt_started_at IS NULL OR state = 'in_flight')
);

CREATE INDEX outbox_intents_due ON outbox_intents (next_attempt_at, id) WHERE state = 'pending';
-- On the lease, not the state, so outcome writes (`state = 'in_flight'`) look rows up by id.
CREATE INDEX outbox_intents_leases ON outbox_intents (lease_expires_at) WHERE lease_expires_at IS NOT NULL;
CREATE INDEX outbox_intents_ordering ON outbox_intents (tenant, ordering_key, id)
    WHERE ordering_key IS NOT NULL AND state IN ('pending', 'in_flight', 'unknown');
CREATE INDEX outbox_intents_finished ON outbox_intents (finished_at) WHERE finished_at IS NOT NULL;
-- Operator listings by tenant of the states people look at. Partial, so the dispatcher's
-- pending → in_flight → delivered transitions add no entries to it.
CREATE INDEX outbox_intents_tenant_review ON outbox_intents (tenant, state, id)
    WHERE state IN ('pending', 'unknown', 'failed');

-- One row per finished attempt, written when it ends (with the outcome, a lease takeover,
-- or a release); the open one lives in outbox_intents.attempt_started_at. No foreign key:
-- the dispatcher writes these on its hot path, and retention deletes an intent's attempts
-- with the intent, in the same statement.
CREATE TABLE outbox_attempts (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    intent_id      INTEGER NOT NULL,
    attempt_number INTEGER NOT NULL,
    fencing_token  INTEGER NOT NULL,
    owner          TEXT NOT NULL,
    started_at     INTEGER NOT NULL,
    ended_at       INTEGER,
    class          TEXT CHECK (class IN ('delivered', 'not_sent', 'retryable', 'rejected', 'ambiguous')),
    http_status    INTEGER,
    error          TEXT,
    provider_ref   TEXT,
    duration_ms    INTEGER
);
CREATE INDEX outbox_attempts_intent ON outbox_attempts (intent_id, attempt_number);

CREATE TABLE outbox_reconciliation_items (
    id                    INTEGER PRIMARY KEY AUTOINCREMENT,
    intent_id             INTEGER NOT NULL REFERENCES outbox_intents (id) ON DELETE CASCADE,
    tenant                TEXT NOT NULL,
    reason                TEXT NOT NULL,
    opened_at             INTEGER NOT NULL,
    resolution            TEXT CHECK (resolution IN ('delivered', 'redispatch', 'abandoned')),
    resolved_by           TEXT,
    resolved_at           INTEGER,
    resolution_note       TEXT,
    resolved_provider_ref TEXT,
    probe_finding         TEXT,
    probe_checked_at      INTEGER,
    probe_count           INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX outbox_reconciliation_open ON outbox_reconciliation_items (intent_id)
    WHERE resolved_at IS NULL;
CREATE INDEX outbox_reconciliation_queue ON outbox_reconciliation_items (opened_at, id)
    WHERE resolved_at IS NULL;

CREATE TABLE outbox_tombstones (
    tenant          TEXT NOT NULL,
    operation_id    TEXT NOT NULL,
    intent_id       INTEGER NOT NULL,
    action          TEXT NOT NULL,
    payload_sha256  TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    final_state     TEXT NOT NULL,
    provider_ref    TEXT,
    finished_at     INTEGER,
    pruned_at       INTEGER NOT NULL,
    PRIMARY KEY (tenant, operation_id)
);
CREATE INDEX outbox_tombstones_pruned ON outbox_tombstones (pruned_at);

CREATE TABLE outbox_audit_log (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    at        INTEGER NOT NULL,
    actor     TEXT NOT NULL,
    action    TEXT NOT NULL,
    tenant    TEXT,
    intent_id INTEGER,
    details   TEXT NOT NULL DEFAULT '{}',
    note      TEXT
);
CREATE INDEX outbox_audit_log_tenant ON outbox_audit_log (tenant, id);
