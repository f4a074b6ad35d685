-- 0003: keys the provider sees are namespaced per tenant with an installation secret; every
-- INSERT, however written, passes the same checks and never records a pruned operation; the
-- digest reads numbers exactly. Carries existing rows forward (see CHANGELOG.md, 0.2.0).

-- One secret per installation (database). Only outboxd's role reads it: the key functions
-- below are SECURITY DEFINER, so producers need no privilege on this table.
CREATE TABLE outboxd_installation (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    key_secret  TEXT NOT NULL CHECK (char_length(key_secret) = 64 AND key_secret ~ '^[0-9a-f]+$'),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);
REVOKE ALL ON outboxd_installation FROM PUBLIC;
-- gen_random_uuid() draws from the server's strong random source.
INSERT INTO outboxd_installation (id, key_secret)
VALUES (1, encode(sha256(convert_to(gen_random_uuid()::text || gen_random_uuid()::text
                                    || gen_random_uuid()::text || clock_timestamp()::text, 'UTF8')), 'hex'));

-- The key as the producer asked for it (NULL: the derived default); `idempotency_key` is
-- now the key sent to the provider.
ALTER TABLE outbox_intents ADD COLUMN requested_idempotency_key TEXT;

-- The key the provider sees: 'obx2_' || hex(HMAC-SHA256(secret, 'outboxd.wire-key.v2' NUL
-- tenant NUL key)). `key` is the producer's key or the default key. Rust's
-- `outboxd::intent::wire_idempotency_key` computes the same (tests/digest_vectors.rs pins both).
CREATE FUNCTION outbox_wire_idempotency_key(p_tenant text, p_key text)
RETURNS text LANGUAGE plpgsql STABLE STRICT SECURITY DEFINER AS $fn$
DECLARE
    secret bytea;
    inner_pad bytea;
    outer_pad bytea;
    message bytea;
BEGIN
    SELECT decode(key_secret, 'hex') INTO STRICT secret FROM outboxd_installation WHERE id = 1;
    inner_pad := secret || decode(repeat('00', 64 - octet_length(secret)), 'hex');
    outer_pad := inner_pad;
    FOR i IN 0..63 LOOP
        inner_pad := set_byte(inner_pad, i, get_byte(inner_pad, i) # 54);  -- 0x36
        outer_pad := set_byte(outer_pad, i, get_byte(outer_pad, i) # 92);  -- 0x5c
    END LOOP;
    message := convert_to('outboxd.wire-key.v2', 'UTF8') || '\x00'::bytea
        || convert_to(p_tenant, 'UTF8') || '\x00'::bytea || convert_to(p_key, 'UTF8');
    RETURN 'obx2_' || encode(sha256(outer_pad || sha256(inner_pad || message)), 'hex');
END
$fn$;
REVOKE ALL ON FUNCTION outbox_wire_idempotency_key(text, text) FROM PUBLIC;

-- Text fields: the same rule as Rust's (`outboxd::intent`): no Unicode control character
-- (Cc), no leading or trailing Unicode White_Space (U+00A0 included), whatever the locale.
CREATE OR REPLACE FUNCTION outbox_check_text(p_field text, p_value text, p_max integer)
RETURNS void LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
    IF p_value IS NULL OR p_value = '' THEN
        RAISE EXCEPTION 'invalid %: must not be empty', p_field USING ERRCODE = '22023';
    END IF;
    IF char_length(p_value) > p_max THEN
        RAISE EXCEPTION 'invalid %: is % characters long, the limit is %',
            p_field, char_length(p_value), p_max USING ERRCODE = '22023';
    END IF;
    IF p_value ~ '[\u0001-\u001f\u007f-\u009f]' THEN
        RAISE EXCEPTION 'invalid %: must not contain control characters', p_field
            USING ERRCODE = '22023';
    END IF;
    IF p_value ~ '^[\u0009-\u000d\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]'
       OR p_value ~ '[\u0009-\u000d\u0020\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]$' THEN
        RAISE EXCEPTION 'invalid %: must not start or end with whitespace', p_field
            USING ERRCODE = '22023';
    END IF;
END
$fn$;

-- Every field of a new intent, checked on every INSERT path (the function and plain INSERTs).
CREATE FUNCTION outbox_check_intent_fields(p_tenant text, p_operation_id text, p_action text,
    p_idempotency_key text, p_ordering_key text, p_payload_version integer)
RETURNS void LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
    PERFORM outbox_check_text('tenant', p_tenant, 128);
    PERFORM outbox_check_text('operation_id', p_operation_id, 200);
    PERFORM outbox_check_text('action', p_action, 128);
    IF p_action !~ '^[A-Za-z0-9_.:-]+$' THEN
        RAISE EXCEPTION 'invalid action: only ASCII letters, digits and _ . : - are allowed'
            USING ERRCODE = '22023';
    END IF;
    IF p_idempotency_key IS NOT NULL THEN
        PERFORM outbox_check_text('idempotency_key', p_idempotency_key, 255);
        -- It is sent as an HTTP header value: visible ASCII and inner spaces only.
        IF p_idempotency_key !~ '^[ -~]+$' THEN
            RAISE EXCEPTION 'invalid idempotency_key: only printable ASCII is allowed (it is sent as an HTTP header)'
                USING ERRCODE = '22023';
        END IF;
    END IF;
    IF p_ordering_key IS NOT NULL THEN
        PERFORM outbox_check_text('ordering_key', p_ordering_key, 255);
    END IF;
    IF p_payload_version IS NULL OR p_payload_version < 1 OR p_payload_version > 1000000 THEN
        RAISE EXCEPTION 'invalid payload_version: is %; it must be between 1 and 1000000',
            coalesce(p_payload_version::text, 'null') USING ERRCODE = '22023';
    END IF;
END
$fn$;

-- Numbers: the exact decimal value, plain notation (see README "Payload digest").
CREATE OR REPLACE FUNCTION outbox_canonical_json(v jsonb, depth integer DEFAULT 1)
RETURNS text LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
    kind text := jsonb_typeof(v);
BEGIN
    IF kind IN ('object', 'array') AND depth > 32 THEN
        RAISE EXCEPTION 'invalid payload: is nested more than 32 levels deep'
            USING ERRCODE = '22023';
    END IF;
    IF kind = 'object' THEN
        RETURN '{' || coalesce((
            SELECT string_agg(to_jsonb(e.key)::text || ':' || outbox_canonical_json(e.value, depth + 1),
                              ',' ORDER BY e.key COLLATE "C")
            FROM jsonb_each(v) AS e), '') || '}';
    ELSIF kind = 'array' THEN
        RETURN '[' || coalesce((
            SELECT string_agg(outbox_canonical_json(e.value, depth + 1), ',' ORDER BY e.ord)
            FROM jsonb_array_elements(v) WITH ORDINALITY AS e(value, ord)), '') || ']';
    ELSIF kind = 'number' THEN
        RETURN trim_scale(v::numeric)::text;
    ELSE
        RETURN v::text;
    END IF;
END
$fn$;

-- Every INSERT: checks the fields, computes the digest (one place on PostgreSQL: a digest
-- written by hand is replaced), and derives the key the provider sees from the requested
-- one (a key written by hand is namespaced like any other: no INSERT can put another
-- tenant's key on the wire).
CREATE OR REPLACE FUNCTION outbox_intents_fill_defaults() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $fn$
BEGIN
    PERFORM outbox_check_intent_fields(NEW.tenant, NEW.operation_id, NEW.action,
        NEW.idempotency_key, NEW.ordering_key, NEW.payload_version);
    NEW.payload_sha256 := outbox_payload_sha256(NEW.action, NEW.payload_version, NEW.payload);
    NEW.requested_idempotency_key := NEW.idempotency_key;
    NEW.idempotency_key := outbox_wire_idempotency_key(NEW.tenant, coalesce(NEW.idempotency_key,
        outbox_default_idempotency_key(NEW.tenant, NEW.operation_id, NEW.action)));
    RETURN NEW;
END
$fn$;
DROP TRIGGER outbox_intents_fill_defaults ON outbox_intents;
CREATE TRIGGER outbox_intents_fill_defaults BEFORE INSERT ON outbox_intents
    FOR EACH ROW EXECUTE FUNCTION outbox_intents_fill_defaults();

-- After the row is in (so after any wait on the unique index for a concurrent prune of the
-- same operation): a tombstone committed by then refuses the INSERT. The query takes a new
-- snapshot (READ COMMITTED), so it sees a prune that committed while the INSERT waited.
-- REPEATABLE READ and SERIALIZABLE keep the transaction's snapshot, which misses a prune
-- committed after it was taken (even one that ended before the INSERT began); there, a
-- placeholder tombstone is inserted and removed again: ON CONFLICT DO NOTHING against a
-- tombstone this snapshot cannot see raises serialization_failure (40001), so the INSERT
-- fails and the retried transaction is answered from the tombstone.
CREATE FUNCTION outbox_intents_refuse_pruned() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $fn$
DECLARE
    placed boolean;
BEGIN
    IF EXISTS (SELECT 1 FROM outbox_tombstones t
               WHERE t.tenant = NEW.tenant AND t.operation_id = NEW.operation_id) THEN
        RAISE EXCEPTION 'operation % of tenant % was already recorded (and pruned); call outbox_enqueue for its receipt',
            NEW.operation_id, NEW.tenant USING ERRCODE = '23505';
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        INSERT INTO outbox_tombstones AS t (tenant, operation_id, intent_id, action,
            payload_sha256, idempotency_key, final_state, pruned_at)
        VALUES (NEW.tenant, NEW.operation_id, NEW.id, NEW.action, NEW.payload_sha256,
            NEW.idempotency_key, 'pending', clock_timestamp())
        ON CONFLICT (tenant, operation_id) DO NOTHING
        RETURNING true INTO placed;
        IF placed IS NOT TRUE THEN
            RAISE EXCEPTION 'operation % of tenant % was already recorded (and pruned); call outbox_enqueue for its receipt',
                NEW.operation_id, NEW.tenant USING ERRCODE = '23505';
        END IF;
        DELETE FROM outbox_tombstones t
         WHERE t.tenant = NEW.tenant AND t.operation_id = NEW.operation_id;
    END IF;
    RETURN NULL;
END
$fn$;
CREATE TRIGGER outbox_intents_refuse_pruned AFTER INSERT ON outbox_intents
    FOR EACH ROW EXECUTE FUNCTION outbox_intents_refuse_pruned();

-- The enqueue core. The tombstone answers first; the INSERT passes the triggers above (the
-- digest and the key are computed there); a prune that commits in between makes the INSERT
-- fail with 23505, and calling again returns the tombstone's receipt. p_payload_sha256 is
-- ignored (kept so that callers built against 0002 still work): the digest is always
-- computed in SQL, and only when it is compared (a replay, a conflict) or stored (trigger).
-- Replaced in place (same signatures), so privileges granted on the 0002 functions stay.
CREATE OR REPLACE FUNCTION outbox_enqueue_prehashed(
    p_tenant text, p_operation_id text, p_action text, p_payload jsonb,
    p_payload_version integer, p_payload_sha256 text, p_idempotency_key text,
    p_ordering_key text, p_not_before timestamptz, p_deadline timestamptz)
RETURNS TABLE (intent_id bigint, idempotency_key text, replayed boolean, state text)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    new_id bigint;
    new_key text;
    existing record;
    tomb record;
BEGIN
    SELECT * INTO tomb FROM outbox_tombstones t
     WHERE t.tenant = p_tenant AND t.operation_id = p_operation_id;
    IF FOUND THEN
        PERFORM outbox_check_intent_fields(p_tenant, p_operation_id, p_action,
            p_idempotency_key, p_ordering_key, p_payload_version);
        IF tomb.payload_sha256 <> outbox_payload_sha256(p_action, p_payload_version, p_payload) THEN
            RAISE EXCEPTION 'conflict: operation % of tenant % was already recorded with a different payload (digest %)',
                p_operation_id, p_tenant, tomb.payload_sha256 USING ERRCODE = 'OB409';
        END IF;
        RETURN QUERY SELECT tomb.intent_id, tomb.idempotency_key, true, tomb.final_state;
        RETURN;
    END IF;

    INSERT INTO outbox_intents AS i (tenant, operation_id, action, payload_version, payload,
        payload_sha256, idempotency_key, ordering_key, next_attempt_at, deadline_at)
    VALUES (p_tenant, p_operation_id, p_action, p_payload_version, p_payload,
        NULL, p_idempotency_key, p_ordering_key, coalesce(p_not_before, clock_timestamp()), p_deadline)
    ON CONFLICT ON CONSTRAINT outbox_intents_operation DO NOTHING
    RETURNING i.id, i.idempotency_key INTO new_id, new_key;
    IF new_id IS NOT NULL THEN
        RETURN QUERY SELECT new_id, new_key, false, 'pending'::text;
        RETURN;
    END IF;

    SELECT i.id, i.payload_sha256, i.idempotency_key, i.state INTO existing
      FROM outbox_intents i WHERE i.tenant = p_tenant AND i.operation_id = p_operation_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'operation % of tenant % is being recorded or pruned concurrently; retry the transaction',
            p_operation_id, p_tenant USING ERRCODE = '40001';
    END IF;
    IF existing.payload_sha256 <> outbox_payload_sha256(p_action, p_payload_version, p_payload) THEN
        RAISE EXCEPTION 'conflict: operation % of tenant % was already recorded with a different payload (digest %)',
            p_operation_id, p_tenant, existing.payload_sha256 USING ERRCODE = 'OB409';
    END IF;
    RETURN QUERY SELECT existing.id, existing.idempotency_key, true, existing.state;
END
$fn$;

-- The producer contract for any language: call inside your own transaction.
--   SELECT * FROM outbox_enqueue('acme', 'op-42', 'issue_refund', '{"amount": 100}');
-- The digest is computed here, in SQL (the Rust library calls this too on PostgreSQL).
CREATE OR REPLACE FUNCTION outbox_enqueue(
    p_tenant text, p_operation_id text, p_action text, p_payload jsonb,
    p_payload_version integer DEFAULT 1, p_idempotency_key text DEFAULT NULL,
    p_ordering_key text DEFAULT NULL, p_not_before timestamptz DEFAULT NULL,
    p_deadline timestamptz DEFAULT NULL)
RETURNS TABLE (intent_id bigint, idempotency_key text, replayed boolean, state text)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
BEGIN
    PERFORM outbox_check_intent_fields(p_tenant, p_operation_id, p_action,
        p_idempotency_key, p_ordering_key, p_payload_version);
    IF p_payload IS NULL THEN
        RAISE EXCEPTION 'invalid payload: must be a JSON object, got null' USING ERRCODE = '22023';
    END IF;
    RETURN QUERY SELECT * FROM outbox_enqueue_prehashed(p_tenant, p_operation_id, p_action,
        p_payload, p_payload_version, NULL, p_idempotency_key, p_ordering_key, p_not_before,
        p_deadline);
END
$fn$;

-- Existing rows. An intent that was never claimed has sent nothing: it gets a namespaced
-- key now. Every other live row keeps the key it may already have sent (a new key would
-- let the provider act twice), recorded as its own requested key.
UPDATE outbox_intents SET requested_idempotency_key = idempotency_key
 WHERE state IN ('in_flight', 'unknown')
    OR (state = 'pending' AND (attempt_count > 0 OR first_sent_at IS NOT NULL));
UPDATE outbox_intents
   SET requested_idempotency_key = nullif(idempotency_key,
           outbox_default_idempotency_key(tenant, operation_id, action)),
       idempotency_key = outbox_wire_idempotency_key(tenant, idempotency_key)
 WHERE state = 'pending' AND attempt_count = 0 AND first_sent_at IS NULL;

-- The SECURITY DEFINER functions look objects up in this schema only, with pg_temp last, so
-- a session's temporary table cannot stand in for outbox_tombstones or outboxd_installation.
DO $do$
BEGIN
    EXECUTE format('ALTER FUNCTION outbox_wire_idempotency_key(text, text) SET search_path = %I, pg_temp',
                   current_schema());
    EXECUTE format('ALTER FUNCTION outbox_intents_fill_defaults() SET search_path = %I, pg_temp',
                   current_schema());
    EXECUTE format('ALTER FUNCTION outbox_intents_refuse_pruned() SET search_path = %I, pg_temp',
                   current_schema());
END
$do$;
