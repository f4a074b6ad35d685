-- Paired with migrations/postgres/0005_bytewise_tenant_turns.sql, which makes the
-- PostgreSQL tenant walk bytewise. SQLite's `tenant` column already compares with BINARY
-- (bytewise), the order the dispatcher uses, so its index stays as it is. Nothing to do but
-- record the version, so both backends keep one schema version.
SELECT 1;
