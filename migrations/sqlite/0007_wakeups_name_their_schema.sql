-- Paired with migrations/postgres/0007_wakeups_name_their_schema.sql. SQLite has no
-- notifications (an idle daemon polls): nothing changes. This migration keeps the version
-- numbers of both backends aligned.
SELECT 1;
