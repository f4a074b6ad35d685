-- Paired with migrations/postgres/0009_field_checks_when_written.sql. SQLite evaluates a
-- CHECK constraint on UPDATE only when the statement sets one of the columns it reads, so
-- the dispatcher's claims and outcomes never re-run the checks on the fields only a
-- producer writes: nothing changes. This migration keeps the version numbers of both
-- backends aligned.
SELECT 1;
