-- Paired with migrations/postgres/0005_bytewise_turns_resend_confirmations.sql. Expand-only.
--
-- 1. The bytewise tenant walk: SQLite's `tenant` column already compares with BINARY
--    (bytewise), the order the dispatcher uses, so its index stays as it is.
-- 2. A person's confirmation that a redispatch may act twice is recorded on the intent, as
--    the attempt number it covers (the first attempt after the redispatch; NULL when not
--    confirmed). One nullable column.
ALTER TABLE outbox_intents ADD COLUMN resend_confirmed_attempt INTEGER;
