-- Paired with migrations/postgres/0004_tenant_turns_provider_states.sql: tenants are served
-- in turn (a per-tenant, per-action due index); each daemon publishes its providers' bulkhead state.
-- Expand-only (the previous binary runs unchanged on this schema).

CREATE INDEX outbox_intents_due_by_tenant ON outbox_intents (tenant, action, next_attempt_at, id)
    WHERE state = 'pending';

-- Times are INTEGER milliseconds since the Unix epoch, as everywhere in this schema.
CREATE TABLE outbox_provider_states (
    owner              TEXT NOT NULL,
    provider           TEXT NOT NULL,
    in_flight          INTEGER NOT NULL CHECK (in_flight >= 0),
    max_in_flight      INTEGER NOT NULL CHECK (max_in_flight >= 0),
    rate_limited_waits INTEGER NOT NULL CHECK (rate_limited_waits >= 0),
    breaker            TEXT NOT NULL CHECK (breaker IN ('closed', 'open', 'half_open')),
    breaker_open_until INTEGER,
    paused_until       INTEGER,
    updated_at         INTEGER NOT NULL,
    PRIMARY KEY (owner, provider)
);
