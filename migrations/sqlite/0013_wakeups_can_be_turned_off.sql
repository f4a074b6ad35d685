-- Paired with migrations/postgres/0013_wakeups_can_be_turned_off.sql, which lets producers
-- turn PostgreSQL's wake-up notification off; SQLite sends none (its dispatcher polls, or
-- is woken inside its own process): nothing changes. This migration keeps the version
-- numbers of both backends aligned.
SELECT 1;
