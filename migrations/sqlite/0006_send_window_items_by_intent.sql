-- Paired with migrations/postgres/0006_send_window_items_by_intent.sql. Expand-only.
--
-- Each daemon also publishes its providers' adaptive send window. One nullable column: the
-- previous binary's publisher writes its rows without it (NULL, read as "not published").
-- SQLite columns take any type: the CHECK also insists on an integer.
ALTER TABLE outbox_provider_states
    ADD COLUMN send_window INTEGER
        CHECK (send_window IS NULL OR (typeof(send_window) = 'integer'
               AND send_window >= 0 AND send_window <= max_in_flight));

-- Reconciliation items by intent, resolved or not: the ON DELETE CASCADE of a pruned intent
-- looks its items up by intent_id, and outbox_reconciliation_open covers open items only.
CREATE INDEX outbox_reconciliation_by_intent ON outbox_reconciliation_items (intent_id);
