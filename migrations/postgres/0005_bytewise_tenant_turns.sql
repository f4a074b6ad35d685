-- 0005: the tenant turn walks tenants in bytewise order (COLLATE "C"), the order Rust's
-- `TenantTurns` uses, whatever the database's collation. Under a linguistic collation
-- (en_US: "a" < "B", "a-b" against "ab") the database's order and the dispatcher's
-- disagreed and a claim could skip a tenant's turn or give it two.
--
-- The claim compares `tenant COLLATE "C"`, which an index on the column's own collation
-- does not serve; this rebuilds `outbox_intents_due_by_tenant` with the "C" collation
-- (under the migration's lock: on a large table writers wait for the build). The previous
-- binary keeps working on this schema, but its claim (default collation) no longer finds
-- this index: replace it soon after migrating.
DROP INDEX outbox_intents_due_by_tenant;
CREATE INDEX outbox_intents_due_by_tenant
    ON outbox_intents (tenant COLLATE "C", action, next_attempt_at, id)
    WHERE state = 'pending';
