-- 0008, contract (the previous binary runs unchanged on this schema): drops the index
-- `outbox_intents_due_by_tenant` (0004), which only the claim of binaries built for
-- schema 4 read. Since 0005 the claim walks tenants in bytewise order through
-- `outbox_intents_due_by_tenant_bytewise` (`tenant COLLATE "C"`); a binary built for
-- schema 5, 6 or 7 never reads the older index, and a binary built for schema 4 does not
-- run on this schema (the compatibility window is a binary's own schema and the next).
-- Until now every pending intent was written to both indexes: on every enqueue, retry,
-- release and redispatch, one index entry more to write, WAL-log and vacuum, and one
-- more index for the planner to weigh in every statement on `outbox_intents` (the claim
-- is planned on every execution, decision 0015). No rows change. `DROP INDEX` takes the
-- table's strongest lock for a moment: it waits for every open transaction that has read
-- or written the table (a producer's, a long report's), and every statement on the table,
-- producers' inserts included, queues behind it while it waits. So the migration waits
-- at most 10 s for the lock and then fails, changing nothing; run it again when no long
-- transaction holds the table.
SET LOCAL lock_timeout = '10s';
DROP INDEX IF EXISTS outbox_intents_due_by_tenant;
-- Later migrations applied in the same run wait as the server's setting says.
SET LOCAL lock_timeout TO DEFAULT;
