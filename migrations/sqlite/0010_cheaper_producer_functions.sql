-- Paired with migrations/postgres/0010_cheaper_producer_functions.sql, which rewrites
-- PostgreSQL's producer functions; SQLite has none (its producers go through the Rust
-- library): nothing changes. This migration keeps the version numbers of both backends
-- aligned.
SELECT 1;
