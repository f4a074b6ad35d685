-- 0006, expand-only (the previous binary runs unchanged on this schema): each daemon also
-- publishes its providers' adaptive send window (requests it may send a provider at once
-- now: 1 after start or after the breaker opened, up to max_in_flight), so that `outboxd
-- status` and `GET /v1/providers` show it beside in_flight/max_in_flight.
--
-- One nullable column, no default: the previous binary's publisher writes its rows without
-- it (NULL, read as "not published"), and adding it rewrites nothing. The CHECK holds for
-- every value a daemon writes and lets NULL through; validating it reads the table, which
-- holds one row per daemon and provider.
ALTER TABLE outbox_provider_states
    ADD COLUMN send_window INTEGER CHECK (send_window >= 0);
