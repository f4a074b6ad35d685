-- 0006: a person's confirmation that a redispatch may act twice is recorded on the intent.
-- Expand-only (the previous binary runs unchanged on this schema): one nullable column, no
-- default, no constraint, so adding it rewrites nothing and scans nothing.

-- The attempt number a person confirmed may make the provider act twice: the first attempt
-- after their redispatch (attempt_count + 1 at the redispatch), written by every redispatch
-- (NULL when it was not confirmed). The dispatcher exempts that one attempt, and no other,
-- from its send-time resend rule; attempt_count only grows, so a confirmation never covers
-- a later attempt or a later redispatch.
ALTER TABLE outbox_intents ADD COLUMN resend_confirmed_attempt INTEGER;
