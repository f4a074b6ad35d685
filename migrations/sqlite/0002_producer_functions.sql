-- Paired with migrations/postgres/0002_producer_functions.sql. SQLite has no stored
-- functions: the producer contract on SQLite is the Rust `outboxd::enqueue` (or the admin
-- API's POST /v1/intents). This migration keeps the version numbers of both backends aligned.
SELECT 1;
