-- 0004: tenants are served in turn; each daemon publishes its providers' bulkhead state.
-- Expand-only (the previous binary runs unchanged on this schema): one index, one table.

-- The claim visits tenants in turn and seeks, per tenant and action of the provider it
-- claims for, the due intents in order: one short index range each, never a scan of
-- another tenant's backlog, nor of a backlog for another (paused or saturated) provider. Built while the
-- migration holds its lock (writers wait for the build on a large table).
CREATE INDEX outbox_intents_due_by_tenant ON outbox_intents (tenant, action, next_attempt_at, id)
    WHERE state = 'pending';

-- Each running daemon (owner) writes one row per provider every few seconds and on a
-- breaker or pause change; `outboxd status` and `GET /v1/providers` read them. A row not
-- updated for a while belongs to a replica that stopped; daemons delete rows older than an
-- hour. Nothing here decides anything: the bulkheads live in each daemon's memory.
CREATE TABLE outbox_provider_states (
    owner              TEXT NOT NULL,
    provider           TEXT NOT NULL,
    in_flight          INTEGER NOT NULL CHECK (in_flight >= 0),
    max_in_flight      INTEGER NOT NULL CHECK (max_in_flight >= 0),
    rate_limited_waits BIGINT NOT NULL CHECK (rate_limited_waits >= 0),
    breaker            TEXT NOT NULL CHECK (breaker IN ('closed', 'open', 'half_open')),
    breaker_open_until TIMESTAMPTZ,
    paused_until       TIMESTAMPTZ,
    updated_at         TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (owner, provider)
);
