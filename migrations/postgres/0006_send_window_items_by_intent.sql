-- 0006, expand-only (the previous binary runs unchanged on this schema): each daemon also
-- publishes its providers' adaptive send window (requests it may send a provider at once
-- now: 1 after start or after the breaker opened, up to max_in_flight), so that `outboxd
-- status` and `GET /v1/providers` show it beside in_flight/max_in_flight.
--
-- One nullable column, no default: the previous binary's publisher writes its rows without
-- it (NULL, read as "not published"), and adding it rewrites nothing. The CHECK holds for
-- every value a daemon writes (a window never exceeds max_in_flight) and lets NULL through; validating it reads the table, which
-- holds one row per daemon and provider.
ALTER TABLE outbox_provider_states
    ADD COLUMN send_window INTEGER
        CHECK (send_window >= 0 AND send_window <= max_in_flight);

-- Reconciliation items by intent, resolved or not. Pruning an intent deletes its items
-- (ON DELETE CASCADE), and the cascade looks them up by intent_id: the only index on that
-- column, outbox_reconciliation_open, is partial (open items only), so without this one
-- every pruned intent scanned the whole items table. Built under the migration's lock; the
-- items table holds one row per outcome that needed a person, so it is small next to the
-- intents.
CREATE INDEX outbox_reconciliation_by_intent ON outbox_reconciliation_items (intent_id);
