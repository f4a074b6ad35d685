-- 0005, expand-only (the previous binary runs unchanged on this schema):
--
-- 1. The tenant turn walks tenants in bytewise order (COLLATE "C"), the order Rust's
--    `TenantTurns` uses, whatever the database's collation. Under a linguistic collation
--    (en_US: "a" < "B", "a-b" against "ab") the database's order and the dispatcher's
--    disagreed and a claim could skip a tenant's turn or give it two. The claim compares
--    `tenant COLLATE "C"`, which an index on the column's own collation does not serve, so
--    this adds `outbox_intents_due_by_tenant_bytewise` (built under the migration's lock: on
--    a large table writers wait for the build). The previous binary's claim (default
--    collation) keeps using `outbox_intents_due_by_tenant`, which stays until a later
--    release drops it (contract one release later).
-- 2. A person's confirmation that a redispatch may act twice is recorded on the intent, as
--    the attempt number it covers: the first attempt after their redispatch
--    (attempt_count + 1 at the redispatch), written by every redispatch, NULL when not
--    confirmed. The dispatcher exempts that one attempt, and no other, from its send-time
--    resend rule; attempt_count only grows, so a confirmation never covers a later attempt
--    or a later redispatch. One nullable column, no default, no constraint: adding it
--    rewrites nothing and scans nothing.
CREATE INDEX outbox_intents_due_by_tenant_bytewise
    ON outbox_intents (tenant COLLATE "C", action, next_attempt_at, id)
    WHERE state = 'pending';
ALTER TABLE outbox_intents ADD COLUMN resend_confirmed_attempt INTEGER;
