-- 0010, contract (the previous binary runs unchanged on this schema): three of the functions
-- every producer's INSERT runs cost less. Each returns exactly what it returned before (the
-- digests and keys that tests/digest_vectors.rs pins), raises the same errors, and keeps
-- its name, signature, owner and privileges (CREATE OR REPLACE).
--
-- * `outbox_default_idempotency_key` is PL/pgSQL instead of SQL: a SQL-language function
--   called from PL/pgSQL is parsed and set up again on every call; a PL/pgSQL one keeps
--   its expression for the session.
-- * `outbox_wire_idempotency_key` builds the HMAC pads with four 64-bit XORs instead of a
--   loop of 128 single-byte updates. It stays SECURITY DEFINER with its search_path pinned
--   to this schema (CREATE OR REPLACE resets a function's SET clauses, so the DO block
--   below pins it again, as 0003 did).
-- * `outbox_enqueue` no longer checks the fields itself before calling
--   `outbox_enqueue_prehashed`: every path it takes checks them there (the tombstone
--   path) or in the INSERT's BEFORE trigger, which runs before ON CONFLICT looks for an
--   existing row. A NULL payload is still refused first with the same message. What a
--   caller can see: an invalid call now uses up a value of the intents' id sequence (ids
--   had gaps already: a rolled-back enqueue leaves one), and the error's CONTEXT lines
--   name the trigger instead of `outbox_enqueue`; the message and SQLSTATE are the same.
--
-- No table or row changes, and no table lock is taken: callers that are running keep the
-- definition they started with and pick the new one up on their next call.

CREATE OR REPLACE FUNCTION outbox_default_idempotency_key(p_tenant text, p_operation_id text, p_action text)
RETURNS text LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
BEGIN
    RETURN 'obx1_' || encode(sha256(
        convert_to('outboxd.idempotency.v1', 'UTF8') || '\x00'::bytea
        || convert_to(p_tenant, 'UTF8') || '\x00'::bytea
        || convert_to(p_operation_id, 'UTF8') || '\x00'::bytea
        || convert_to(p_action, 'UTF8')), 'hex');
END
$fn$;

-- The key the provider sees, as 0003 defined it: 'obx2_' || hex(HMAC-SHA256(secret,
-- 'outboxd.wire-key.v2' NUL tenant NUL key)). The secret is 32 bytes (64 hex digits, by
-- the table's CHECK), so the 64-byte HMAC block is the secret's four 8-byte words followed
-- by 32 zero bytes; each pad XORs them with 0x36 (inner) or 0x5c (outer) repeated.
CREATE OR REPLACE FUNCTION outbox_wire_idempotency_key(p_tenant text, p_key text)
RETURNS text LANGUAGE plpgsql STABLE STRICT SECURITY DEFINER AS $fn$
DECLARE
    secret text;
    inner_pad bytea;
    outer_pad bytea;
    message bytea;
BEGIN
    SELECT key_secret INTO STRICT secret FROM outboxd_installation WHERE id = 1;
    inner_pad := decode(
        lpad(to_hex(('x' || substr(secret, 1, 16))::bit(64)::bigint # 3906369333256140342), 16, '0')
        || lpad(to_hex(('x' || substr(secret, 17, 16))::bit(64)::bigint # 3906369333256140342), 16, '0')
        || lpad(to_hex(('x' || substr(secret, 33, 16))::bit(64)::bigint # 3906369333256140342), 16, '0')
        || lpad(to_hex(('x' || substr(secret, 49, 16))::bit(64)::bigint # 3906369333256140342), 16, '0')
        || repeat('36', 32), 'hex');  -- 3906369333256140342 = 0x3636363636363636
    outer_pad := decode(
        lpad(to_hex(('x' || substr(secret, 1, 16))::bit(64)::bigint # 6655295901103053916), 16, '0')
        || lpad(to_hex(('x' || substr(secret, 17, 16))::bit(64)::bigint # 6655295901103053916), 16, '0')
        || lpad(to_hex(('x' || substr(secret, 33, 16))::bit(64)::bigint # 6655295901103053916), 16, '0')
        || lpad(to_hex(('x' || substr(secret, 49, 16))::bit(64)::bigint # 6655295901103053916), 16, '0')
        || repeat('5c', 32), 'hex');  -- 6655295901103053916 = 0x5c5c5c5c5c5c5c5c
    message := convert_to('outboxd.wire-key.v2', 'UTF8') || '\x00'::bytea
        || convert_to(p_tenant, 'UTF8') || '\x00'::bytea || convert_to(p_key, 'UTF8');
    RETURN 'obx2_' || encode(sha256(outer_pad || sha256(inner_pad || message)), 'hex');
END
$fn$;

CREATE OR REPLACE FUNCTION outbox_enqueue(
    p_tenant text, p_operation_id text, p_action text, p_payload jsonb,
    p_payload_version integer DEFAULT 1, p_idempotency_key text DEFAULT NULL,
    p_ordering_key text DEFAULT NULL, p_not_before timestamptz DEFAULT NULL,
    p_deadline timestamptz DEFAULT NULL)
RETURNS TABLE (intent_id bigint, idempotency_key text, replayed boolean, state text)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
BEGIN
    IF p_payload IS NULL THEN
        -- An invalid field is named ahead of the missing payload, as before.
        PERFORM outbox_check_intent_fields(p_tenant, p_operation_id, p_action,
            p_idempotency_key, p_ordering_key, p_payload_version);
        RAISE EXCEPTION 'invalid payload: must be a JSON object, got null' USING ERRCODE = '22023';
    END IF;
    RETURN QUERY SELECT * FROM outbox_enqueue_prehashed(p_tenant, p_operation_id, p_action,
        p_payload, p_payload_version, NULL, p_idempotency_key, p_ordering_key, p_not_before,
        p_deadline);
END
$fn$;

DO $do$
BEGIN
    EXECUTE format('ALTER FUNCTION outbox_wire_idempotency_key(text, text) SET search_path = %I, pg_temp',
                   current_schema());
END
$do$;
