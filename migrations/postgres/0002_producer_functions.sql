-- The producer contract in SQL, for services that are not written in Rust. Semantics match
-- `outboxd::enqueue` exactly (shared test vectors and the shared behaviour suite check it).
--
-- Errors raised:
--   SQLSTATE 22023 (invalid_parameter_value) — a field is invalid; the message names it.
--   SQLSTATE OB409 — conflict: the operation id exists with a different payload digest.

-- Canonical JSON (see README "Payload digest"). `depth` counts object/array nesting.
CREATE FUNCTION outbox_canonical_json(v jsonb, depth integer DEFAULT 1)
RETURNS text LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
DECLARE
    kind text := jsonb_typeof(v);
    n numeric;
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
        n := v::numeric;
        IF n = trunc(n) AND n BETWEEN -9223372036854775808 AND 18446744073709551615 THEN
            RETURN trunc(n)::text;
        END IF;
        RETURN trim_scale(((n::float8)::text)::numeric)::text;
    ELSE
        RETURN v::text;
    END IF;
END
$fn$;

CREATE FUNCTION outbox_payload_sha256(p_action text, p_payload_version integer, p_payload jsonb)
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
    RETURN encode(sha256(convert_to(
        '{"action":' || to_jsonb(p_action)::text || ',"payload":' || canonical
            || ',"payload_version":' || p_payload_version::text || '}', 'UTF8')), 'hex');
END
$fn$;

CREATE FUNCTION outbox_default_idempotency_key(p_tenant text, p_operation_id text, p_action text)
RETURNS text LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
    SELECT 'obx1_' || encode(sha256(
        convert_to('outboxd.idempotency.v1', 'UTF8') || '\x00'::bytea
        || convert_to(p_tenant, 'UTF8') || '\x00'::bytea
        || convert_to(p_operation_id, 'UTF8') || '\x00'::bytea
        || convert_to(p_action, 'UTF8')), 'hex')
$fn$;

CREATE FUNCTION outbox_check_text(p_field text, p_value text, p_max integer)
RETURNS void LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
    IF p_value IS NULL OR p_value = '' THEN
        RAISE EXCEPTION 'invalid %: must not be empty', p_field USING ERRCODE = '22023';
    END IF;
    IF char_length(p_value) > p_max THEN
        RAISE EXCEPTION 'invalid %: is % characters long, the limit is %',
            p_field, char_length(p_value), p_max USING ERRCODE = '22023';
    END IF;
    IF p_value ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION 'invalid %: must not contain control characters', p_field
            USING ERRCODE = '22023';
    END IF;
    IF p_value ~ '^\s' OR p_value ~ '\s$' THEN
        RAISE EXCEPTION 'invalid %: must not start or end with whitespace', p_field
            USING ERRCODE = '22023';
    END IF;
END
$fn$;

-- Plain INSERTs by producers (leaving payload_sha256 NULL) stay safe: the database fills in
-- the digest and the key, and refuses an operation that was already recorded and pruned
-- (its tombstone answers instead: use outbox_enqueue to get the receipt).
CREATE FUNCTION outbox_intents_fill_defaults() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF EXISTS (SELECT 1 FROM outbox_tombstones t
               WHERE t.tenant = NEW.tenant AND t.operation_id = NEW.operation_id) THEN
        RAISE EXCEPTION 'operation % of tenant % was already recorded (and pruned); call outbox_enqueue for its receipt',
            NEW.operation_id, NEW.tenant USING ERRCODE = '23505';
    END IF;
    IF NEW.payload_sha256 IS NULL THEN
        NEW.payload_sha256 := outbox_payload_sha256(NEW.action, NEW.payload_version, NEW.payload);
    END IF;
    IF NEW.idempotency_key IS NULL THEN
        NEW.idempotency_key := outbox_default_idempotency_key(NEW.tenant, NEW.operation_id, NEW.action);
    END IF;
    RETURN NEW;
END
$fn$;
CREATE TRIGGER outbox_intents_fill_defaults BEFORE INSERT ON outbox_intents
    FOR EACH ROW WHEN (NEW.payload_sha256 IS NULL OR NEW.idempotency_key IS NULL)
    EXECUTE FUNCTION outbox_intents_fill_defaults();

-- Wake dispatchers (LISTEN outboxd_intents) when intents are committed.
CREATE FUNCTION outbox_intents_notify() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM pg_notify('outboxd_intents', '');
    RETURN NULL;
END
$fn$;
CREATE TRIGGER outbox_intents_notify AFTER INSERT ON outbox_intents
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_intents_notify();

-- The enqueue core, given a digest already computed. Call it in READ COMMITTED (PostgreSQL's
-- default): in REPEATABLE READ or SERIALIZABLE an enqueue racing with the pruning of the same
-- operation could miss the tombstone written after its snapshot. The Rust library calls this directly
-- (it computes the same digest client-side); other callers use outbox_enqueue below.
CREATE FUNCTION outbox_enqueue_prehashed(
    p_tenant text, p_operation_id text, p_action text, p_payload jsonb,
    p_payload_version integer, p_payload_sha256 text, p_idempotency_key text,
    p_ordering_key text, p_not_before timestamptz, p_deadline timestamptz)
RETURNS TABLE (intent_id bigint, idempotency_key text, replayed boolean, state text)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    new_id bigint;
    existing record;
    tomb record;
    v_key text := coalesce(p_idempotency_key,
                           outbox_default_idempotency_key(p_tenant, p_operation_id, p_action));
BEGIN
    INSERT INTO outbox_intents AS i (tenant, operation_id, action, payload_version, payload,
        payload_sha256, idempotency_key, ordering_key, next_attempt_at, deadline_at)
    VALUES (p_tenant, p_operation_id, p_action, p_payload_version, p_payload,
        p_payload_sha256, v_key, p_ordering_key, coalesce(p_not_before, clock_timestamp()), p_deadline)
    ON CONFLICT ON CONSTRAINT outbox_intents_operation DO NOTHING
    RETURNING i.id INTO new_id;

    IF new_id IS NOT NULL THEN
        -- A pruned operation may have left a tombstone; it answers instead (never re-executed).
        SELECT * INTO tomb FROM outbox_tombstones t
         WHERE t.tenant = p_tenant AND t.operation_id = p_operation_id;
        IF NOT FOUND THEN
            RETURN QUERY SELECT new_id, v_key, false, 'pending'::text;
            RETURN;
        END IF;
        DELETE FROM outbox_intents WHERE id = new_id;
        IF tomb.payload_sha256 <> p_payload_sha256 THEN
            RAISE EXCEPTION 'conflict: operation % of tenant % was already recorded with a different payload (digest %)',
                p_operation_id, p_tenant, tomb.payload_sha256 USING ERRCODE = 'OB409';
        END IF;
        RETURN QUERY SELECT tomb.intent_id, tomb.idempotency_key, true, tomb.final_state;
        RETURN;
    END IF;

    SELECT i.id, i.payload_sha256, i.idempotency_key, i.state INTO existing
      FROM outbox_intents i WHERE i.tenant = p_tenant AND i.operation_id = p_operation_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'operation % of tenant % is being recorded or pruned concurrently; retry the transaction',
            p_operation_id, p_tenant USING ERRCODE = '40001';
    END IF;
    IF existing.payload_sha256 <> p_payload_sha256 THEN
        RAISE EXCEPTION 'conflict: operation % of tenant % was already recorded with a different payload (digest %)',
            p_operation_id, p_tenant, existing.payload_sha256 USING ERRCODE = 'OB409';
    END IF;
    RETURN QUERY SELECT existing.id, existing.idempotency_key, true, existing.state;
END
$fn$;

-- The producer contract for any language: call inside your own transaction.
--   SELECT * FROM outbox_enqueue('acme', 'op-42', 'issue_refund', '{"amount": 100}');
CREATE FUNCTION outbox_enqueue(
    p_tenant text, p_operation_id text, p_action text, p_payload jsonb,
    p_payload_version integer DEFAULT 1, p_idempotency_key text DEFAULT NULL,
    p_ordering_key text DEFAULT NULL, p_not_before timestamptz DEFAULT NULL,
    p_deadline timestamptz DEFAULT NULL)
RETURNS TABLE (intent_id bigint, idempotency_key text, replayed boolean, state text)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
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
    END IF;
    IF p_ordering_key IS NOT NULL THEN
        PERFORM outbox_check_text('ordering_key', p_ordering_key, 255);
    END IF;
    IF p_payload_version IS NULL OR p_payload_version < 1 OR p_payload_version > 1000000 THEN
        RAISE EXCEPTION 'invalid payload_version: is %; it must be between 1 and 1000000',
            coalesce(p_payload_version::text, 'null') USING ERRCODE = '22023';
    END IF;
    IF p_payload IS NULL THEN
        RAISE EXCEPTION 'invalid payload: must be a JSON object, got null' USING ERRCODE = '22023';
    END IF;
    RETURN QUERY SELECT * FROM outbox_enqueue_prehashed(p_tenant, p_operation_id, p_action,
        p_payload, p_payload_version, outbox_payload_sha256(p_action, p_payload_version, p_payload),
        p_idempotency_key, p_ordering_key, p_not_before, p_deadline);
END
$fn$;
