-- Paired with migrations/postgres/0008_drop_superseded_tenant_walk_index.sql. SQLite
-- compares text bytewise already, so its claim has always walked tenants through
-- `outbox_intents_due_by_tenant` (0004), which stays: nothing changes. This migration
-- keeps the version numbers of both backends aligned.
SELECT 1;
