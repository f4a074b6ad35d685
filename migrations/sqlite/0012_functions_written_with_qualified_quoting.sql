-- Paired with migrations/postgres/0012_functions_written_with_qualified_quoting.sql, which
-- writes PostgreSQL's producer and trigger functions again; SQLite has no such functions
-- (its producers go through the Rust library): nothing changes. This migration keeps the
-- version numbers of both backends aligned.
SELECT 1;
