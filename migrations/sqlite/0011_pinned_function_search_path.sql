-- Paired with migrations/postgres/0011_pinned_function_search_path.sql, which pins the
-- search_path of PostgreSQL's producer and trigger functions; SQLite has no such
-- functions (its producers go through the Rust library): nothing changes. This migration
-- keeps the version numbers of both backends aligned.
SELECT 1;
