-- Paired with migrations/postgres/0006_provider_send_window.sql. Expand-only.
--
-- Each daemon also publishes its providers' adaptive send window. One nullable column: the
-- previous binary's publisher writes its rows without it (NULL, read as "not published").
ALTER TABLE outbox_provider_states
    ADD COLUMN send_window INTEGER CHECK (send_window >= 0);
