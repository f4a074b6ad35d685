-- 0010, contract (the previous binary runs unchanged on this schema): the functions that
-- derive a new intent's digest and keys cost less, and two of the built-ins they call are
-- called by their pg_catalog names. Each returns exactly what it returned before (the
-- digests and keys that tests/it/digest_vectors.rs pins), raises the same errors, and
-- keeps its name, signature, owner and privileges (CREATE OR REPLACE).
--
-- * `outbox_default_idempotency_key` is PL/pgSQL instead of SQL: a SQL-language function
--   called from PL/pgSQL is parsed and set up again on every call; a PL/pgSQL one keeps
--   its expression for the session.
-- * `outbox_wire_idempotency_key` builds the HMAC pads with four 64-bit XORs instead of a
--   loop of 128 single-byte updates. It stays SECURITY DEFINER with its search_path pinned
--   to this schema (CREATE OR REPLACE resets a function's SET clauses, so the DO block
--   below pins it again, as 0003 did).
-- * These two, `outbox_payload_sha256` and `outbox_canonical_json` call `convert_to` and
--   `to_jsonb` as `pg_catalog.convert_to` and `pg_catalog.to_jsonb`. They run inside the
--   SECURITY DEFINER INSERT trigger, whose search_path is this schema; PostgreSQL prefers
--   a function whose parameter types match the call more closely wherever it sits on the
--   path, so a `convert_to(text, text)` or a `to_jsonb(text)` created in this schema by a
--   role that may create objects there (on PostgreSQL 14 and older every role may, in
--   `public`) ran with the rights of these functions' owner on every INSERT. This does
--   not close that door: an aggregate declared with an `unknown` argument outbids any
--   built-in or outboxd function called with an untyped literal (`encode(…, 'hex')`,
--   `string_agg(…, ',')`, `outbox_check_text('tenant', …)`), and a planted overload can
--   make a call ambiguous. Only roles trusted with the owner's rights may create objects
--   in outboxd's schema; outboxd warns at start and on `outboxd migrate` when others may.
--
-- No table or row changes, and no table lock is taken: callers that are running keep the
-- definition they started with and pick the new one up on their next call.

CREATE OR REPLACE FUNCTION outbox_default_idempotency_key(p_tenant text, p_operation_id text, p_action text)
RETURNS text LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
BEGIN
    RETURN 'obx1_' || encode(sha256(
        pg_catalog.convert_to('outboxd.idempotency.v1', 'UTF8') || '\x00'::bytea
        || pg_catalog.convert_to(p_tenant, 'UTF8') || '\x00'::bytea
        || pg_catalog.convert_to(p_operation_id, 'UTF8') || '\x00'::bytea
        || pg_catalog.convert_to(p_action, 'UTF8')), 'hex');
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
    message := pg_catalog.convert_to('outboxd.wire-key.v2', 'UTF8') || '\x00'::bytea
        || pg_catalog.convert_to(p_tenant, 'UTF8') || '\x00'::bytea
        || pg_catalog.convert_to(p_key, 'UTF8');
    RETURN 'obx2_' || encode(sha256(outer_pad || sha256(inner_pad || message)), 'hex');
END
$fn$;

-- As 0003 defined it (see README "Payload digest"), with the built-ins above qualified.
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
            SELECT string_agg(pg_catalog.to_jsonb(e.key)::text || ':'
                                  || outbox_canonical_json(e.value, depth + 1),
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

-- As 0002 defined it, with the built-ins above qualified.
CREATE OR REPLACE FUNCTION outbox_payload_sha256(p_action text, p_payload_version integer, p_payload jsonb)
RETURNS text LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
    canonical text;
BEGIN
    IF jsonb_typeof(p_payload) <> 'object' THEN
        RAISE EXCEPTION 'invalid payload: must be a JSON object, got %', jsonb_typeof(p_payload)
            USING ERRCODE = '22023';
    END IF;
    canonical := outbox_canonical_json(p_payload);
    IF octet_length(canonical) > 262144 THEN
        RAISE EXCEPTION 'invalid payload: is % bytes in canonical form, the limit is 262144',
            octet_length(canonical) USING ERRCODE = '22023';
    END IF;
    RETURN encode(sha256(pg_catalog.convert_to(
        '{"action":' || pg_catalog.to_jsonb(p_action)::text || ',"payload":' || canonical
            || ',"payload_version":' || p_payload_version::text || '}', 'UTF8')), 'hex');
END
$fn$;

DO $do$
BEGIN
    EXECUTE format('ALTER FUNCTION outbox_wire_idempotency_key(text, text) SET search_path = %I, pg_temp',
                   current_schema());
END
$do$;
