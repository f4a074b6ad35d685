-- Paired with migrations/postgres/0003_tenant_keys_exact_numbers.sql. SQLite has no HMAC:
-- the Rust enqueue (the only producer path on SQLite, with the admin API) derives the key
-- the provider sees, and `outboxd migrate` re-keys never-claimed intents in Rust right
-- after this file, in the same transaction (src/store/migrate.rs).

-- One secret per installation (database file). randomblob() draws from SQLite's
-- cryptographic PRNG, seeded by the operating system.
CREATE TABLE outboxd_installation (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    key_secret  TEXT NOT NULL CHECK (length(key_secret) = 64),
    created_at  INTEGER NOT NULL
);
INSERT INTO outboxd_installation (id, key_secret, created_at)
VALUES (1, lower(hex(randomblob(32))), CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));

-- The key as the producer asked for it (NULL: the derived default); `idempotency_key` is
-- the key sent to the provider.
ALTER TABLE outbox_intents ADD COLUMN requested_idempotency_key TEXT;

-- No INSERT, however written, records an operation that has a tombstone. (SQLite has one
-- writer at a time: no prune can commit between this check and the insert.)
CREATE TRIGGER outbox_intents_refuse_pruned BEFORE INSERT ON outbox_intents
WHEN EXISTS (SELECT 1 FROM outbox_tombstones t
             WHERE t.tenant = NEW.tenant AND t.operation_id = NEW.operation_id)
BEGIN
    SELECT RAISE(ABORT, 'operation was already recorded (and pruned); enqueue it through outboxd for its receipt');
END;

-- Live rows that may already have sent their key keep it, as their own requested key.
UPDATE outbox_intents SET requested_idempotency_key = idempotency_key
 WHERE state IN ('in_flight', 'unknown')
    OR (state = 'pending' AND (attempt_count > 0 OR first_sent_at IS NOT NULL));
