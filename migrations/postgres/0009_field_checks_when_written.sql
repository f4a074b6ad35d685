-- 0009, contract (the previous binary runs unchanged on this schema): the checks on an
-- intent's fields that only a producer writes (tenant, operation_id, action,
-- payload_version, payload, payload_sha256, idempotency_key, ordering_key) run when a
-- statement writes one of those fields, no longer on every UPDATE of the row.
--
-- PostgreSQL evaluates every CHECK constraint of a table on every UPDATE, whichever
-- columns it sets. The dispatcher updates each intent at least twice (its claim and its
-- outcome) and never writes these fields, so until now both updates re-ran two regular
-- expressions and `jsonb_typeof(payload)`, which reads the whole payload back from its
-- TOAST storage and decompresses it when it is large. SQLite already skips a CHECK whose
-- columns an UPDATE does not set (its 0009 changes nothing).
--
-- The rules are the same, word for word, as the constraints they replace. A row that
-- breaks one is refused with SQLSTATE 23514 (check_violation), the constraint's name as
-- its constraint field and PostgreSQL's own message (no DETAIL line, which quoted the
-- whole row). The rules are tried in the constraints' name order, as PostgreSQL tries
-- CHECKs, so a row that breaks several names the same one (but a field rule now comes
-- ahead of the state, lease and open-attempt CHECKs, which stay); a NULL in a NOT NULL field is
-- left to the NOT NULL constraint (23502), as before. They are checked by a BEFORE row
-- trigger on INSERT, after `outbox_intents_fill_defaults` (triggers of the same kind fire
-- in name order) has derived the digest and the key, and on an UPDATE that names one of
-- these columns in its SET list (`UPDATE OF`). The function runs with its own
-- search_path, so functions or operators of the caller's schemas cannot stand in for
-- the built-ins the rules use.
--
-- What the CHECKs covered and the trigger does not (each needs the table's owner, a
-- superuser, or a privilege granted for it: TRIGGER on the table, SET on
-- session_replication_role): a BEFORE trigger of your own that rewrites one of these fields after this
-- one has run (it sorts later, or the UPDATE does not name the field); sessions with
-- `session_replication_role = replica`, which fire no triggers; and tables that INHERIT
-- outbox_intents (triggers are not inherited).
--
-- No rows change: every stored row already satisfies the rules. The migration takes the
-- table's strongest lock first, before anything else, so it waits at most 10 s in all
-- for transactions that hold the table and then fails changing nothing (run it again when
-- no long transaction holds the table); and a producer transaction that read the outbox
-- before the migration started and writes to it while the migration waits goes first,
-- instead of deadlocking with a migration that already held a weaker lock.
SET LOCAL lock_timeout = '10s';
LOCK TABLE outbox_intents IN ACCESS EXCLUSIVE MODE;

CREATE FUNCTION outbox_intents_check_fields() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    broken text;
BEGIN
    -- A NULL in a NOT NULL field: the NOT NULL constraint refuses the row after the
    -- BEFORE triggers, with its own SQLSTATE.
    IF NEW.tenant IS NULL OR NEW.operation_id IS NULL OR NEW.action IS NULL
       OR NEW.payload_version IS NULL OR NEW.payload IS NULL OR NEW.payload_sha256 IS NULL
       OR NEW.idempotency_key IS NULL THEN
        RETURN NEW;
    END IF;
    -- In the constraints' name order; a rule whose expression is NULL holds, as a
    -- CHECK's does.
    broken := CASE
        WHEN NOT (char_length(NEW.action) BETWEEN 1 AND 128
                  AND NEW.action ~ '^[A-Za-z0-9_.:-]+$')
            THEN 'outbox_intents_action_check'
        WHEN NOT (char_length(NEW.idempotency_key) BETWEEN 1 AND 255)
            THEN 'outbox_intents_idempotency_key_check'
        WHEN NOT (char_length(NEW.operation_id) BETWEEN 1 AND 200)
            THEN 'outbox_intents_operation_id_check'
        WHEN NOT (char_length(NEW.ordering_key) BETWEEN 1 AND 255)
            THEN 'outbox_intents_ordering_key_check'
        WHEN NOT (jsonb_typeof(NEW.payload) = 'object')
            THEN 'outbox_intents_payload_check'
        WHEN NOT (char_length(NEW.payload_sha256) = 64 AND NEW.payload_sha256 ~ '^[0-9a-f]+$')
            THEN 'outbox_intents_payload_sha256_check'
        WHEN NOT (NEW.payload_version BETWEEN 1 AND 1000000)
            THEN 'outbox_intents_payload_version_check'
        WHEN NOT (char_length(NEW.tenant) BETWEEN 1 AND 128)
            THEN 'outbox_intents_tenant_check'
    END;
    IF broken IS NOT NULL THEN
        RAISE EXCEPTION 'new row for relation "%" violates check constraint "%"', TG_TABLE_NAME, broken
            USING ERRCODE = 'check_violation', CONSTRAINT = broken, TABLE = TG_TABLE_NAME,
                  SCHEMA = TG_TABLE_SCHEMA;
    END IF;
    RETURN NEW;
END
$fn$;

CREATE TRIGGER outbox_intents_verify_fields
    BEFORE INSERT OR UPDATE OF tenant, operation_id, action, payload_version, payload,
        payload_sha256, idempotency_key, ordering_key
    ON outbox_intents
    FOR EACH ROW EXECUTE FUNCTION outbox_intents_check_fields();

ALTER TABLE outbox_intents
    DROP CONSTRAINT outbox_intents_tenant_check,
    DROP CONSTRAINT outbox_intents_operation_id_check,
    DROP CONSTRAINT outbox_intents_action_check,
    DROP CONSTRAINT outbox_intents_payload_version_check,
    DROP CONSTRAINT outbox_intents_payload_check,
    DROP CONSTRAINT outbox_intents_payload_sha256_check,
    DROP CONSTRAINT outbox_intents_idempotency_key_check,
    DROP CONSTRAINT outbox_intents_ordering_key_check;

-- Later migrations applied in the same run wait as the server's setting says.
SET LOCAL lock_timeout TO DEFAULT;
