-- Paired with migrations/postgres/0006_resend_confirmations.sql: a person's confirmation that
-- a redispatch may act twice is recorded on the intent, as the attempt number it covers (the
-- first attempt after the redispatch; NULL when not confirmed).
-- Expand-only (the previous binary runs unchanged on this schema): one nullable column.

ALTER TABLE outbox_intents ADD COLUMN resend_confirmed_attempt INTEGER;
