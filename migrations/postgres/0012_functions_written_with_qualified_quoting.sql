-- 0012, contract (the previous binary runs unchanged on this schema): writes the producer
-- functions and INSERT triggers of 0011 again, with the schema's name quoted by pg_catalog's
-- own functions, and with outbox_canonical_json naming the built-ins it calls.
--
-- 0011 quoted the schema's name with unqualified quote_ident(current_schema()) and
-- quote_literal(current_schema()). current_schema() returns `name`, and a quote_ident(name)
-- or quote_literal(name) created in a schema on the migrating session's path fits that call
-- better than the built-in's `text` parameter: its result was written into the bodies of
-- the SECURITY DEFINER trigger functions, so a function of its choosing could have been
-- called there on every INSERT, with the owner's rights, long after the plant was dropped.
-- 0003 and 0010 made such calls as well (convert_to(…, 'UTF8') while making the
-- installation's key secret, format(…, current_schema())); outboxd migrate now searches only
-- the schema it migrates and refuses one holding such a function (src/store/migrate.rs),
-- but a database migrated earlier may carry what one wrote. Writing every function again
-- from this text replaces whatever it carried. It cannot tell whether a plant read the
-- installation's key secret while 0003 made it (CHANGELOG.md, 0.x: "Upgrading").
--
-- outbox_canonical_json has no search_path of its own (it is called once per JSON value, and
-- a SET clause costs a settings switch per call): it now names pg_catalog for every built-in
-- it calls, so that a function on the path of a session calling it directly cannot outbid
-- one. Inside the triggers it ran on their pinned path already.
--
-- Each function returns exactly what it returned before (tests/it/digest_vectors.rs pins the
-- digests and keys), raises the same errors, and keeps its name, signature, owner and
-- privileges (CREATE OR REPLACE). No table or row changes and no table lock.
DO $do$
DECLARE
    s constant text := pg_catalog.quote_ident(pg_catalog.current_schema()::pg_catalog.text);
    l constant text := pg_catalog.quote_literal(pg_catalog.current_schema()::pg_catalog.text);
    definitions constant text[] := ARRAY[
$def$
CREATE OR REPLACE FUNCTION @schema@.outbox_check_intent_fields(p_tenant text,
    p_operation_id text, p_action text, p_idempotency_key text, p_ordering_key text,
    p_payload_version integer)
RETURNS void LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $outboxd_fn$
BEGIN
    PERFORM @schema@.outbox_check_text('tenant'::text, p_tenant, 128);
    PERFORM @schema@.outbox_check_text('operation_id'::text, p_operation_id, 200);
    PERFORM @schema@.outbox_check_text('action'::text, p_action, 128);
    IF p_action !~ '^[A-Za-z0-9_.:-]+$' THEN
        RAISE EXCEPTION 'invalid action: only ASCII letters, digits and _ . : - are allowed'
            USING ERRCODE = '22023';
    END IF;
    IF p_idempotency_key IS NOT NULL THEN
        PERFORM @schema@.outbox_check_text('idempotency_key'::text, p_idempotency_key, 255);
        -- It is sent as an HTTP header value: visible ASCII and inner spaces only.
        IF p_idempotency_key !~ '^[ -~]+$' THEN
            RAISE EXCEPTION 'invalid idempotency_key: only printable ASCII is allowed (it is sent as an HTTP header)'
                USING ERRCODE = '22023';
        END IF;
    END IF;
    IF p_ordering_key IS NOT NULL THEN
        PERFORM @schema@.outbox_check_text('ordering_key'::text, p_ordering_key, 255);
    END IF;
    IF p_payload_version IS NULL OR p_payload_version < 1 OR p_payload_version > 1000000 THEN
        RAISE EXCEPTION 'invalid payload_version: is %; it must be between 1 and 1000000',
            coalesce(p_payload_version::text, 'null') USING ERRCODE = '22023';
    END IF;
END
$outboxd_fn$
$def$,
$def$
CREATE OR REPLACE FUNCTION @schema@.outbox_canonical_json(v jsonb, depth integer DEFAULT 1)
RETURNS text LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $outboxd_fn$
DECLARE
    -- Named by schema: a PL/pgSQL function resolves its variables' types once per session,
    -- on the path of its first call, and this one has no path of its own; so are the
    -- built-ins it calls, which a function on a direct caller's path could outbid.
    kind pg_catalog.text := pg_catalog.jsonb_typeof(v);
BEGIN
    IF kind IN ('object', 'array') AND depth > 32 THEN
        RAISE EXCEPTION 'invalid payload: is nested more than 32 levels deep'
            USING ERRCODE = '22023';
    END IF;
    IF kind = 'object' THEN
        RETURN '{' || coalesce((
            SELECT pg_catalog.string_agg(pg_catalog.to_jsonb(e.key)::text || ':'
                                  || @schema@.outbox_canonical_json(e.value, depth + 1),
                              ',' ORDER BY e.key COLLATE "C")
            FROM pg_catalog.jsonb_each(v) AS e), '') || '}';
    ELSIF kind = 'array' THEN
        RETURN '[' || coalesce((
            SELECT pg_catalog.string_agg(@schema@.outbox_canonical_json(e.value, depth + 1), ','
                                       ORDER BY e.ord)
            FROM pg_catalog.jsonb_array_elements(v) WITH ORDINALITY AS e(value, ord)), '') || ']';
    ELSIF kind = 'number' THEN
        RETURN pg_catalog.trim_scale(v::pg_catalog.numeric)::pg_catalog.text;
    ELSE
        RETURN v::pg_catalog.text;
    END IF;
END
$outboxd_fn$
$def$,
$def$
CREATE OR REPLACE FUNCTION @schema@.outbox_payload_sha256(p_action text, p_payload_version integer,
    p_payload jsonb)
RETURNS text LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp AS $outboxd_fn$
DECLARE
    canonical text;
BEGIN
    IF jsonb_typeof(p_payload) <> 'object' THEN
        RAISE EXCEPTION 'invalid payload: must be a JSON object, got %', jsonb_typeof(p_payload)
            USING ERRCODE = '22023';
    END IF;
    canonical := @schema@.outbox_canonical_json(p_payload, 1);
    IF octet_length(canonical) > 262144 THEN
        RAISE EXCEPTION 'invalid payload: is % bytes in canonical form, the limit is 262144',
            octet_length(canonical) USING ERRCODE = '22023';
    END IF;
    RETURN encode(sha256(convert_to(
        '{"action":' || to_jsonb(p_action)::text || ',"payload":' || canonical
            || ',"payload_version":' || p_payload_version::text || '}', 'UTF8')), 'hex');
END
$outboxd_fn$
$def$,
$def$
CREATE OR REPLACE FUNCTION @schema@.outbox_default_idempotency_key(p_tenant text,
    p_operation_id text, p_action text)
RETURNS text LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp AS $outboxd_fn$
BEGIN
    RETURN 'obx1_' || encode(sha256(
        convert_to('outboxd.idempotency.v1', 'UTF8') || '\x00'::bytea
        || convert_to(p_tenant, 'UTF8') || '\x00'::bytea
        || convert_to(p_operation_id, 'UTF8') || '\x00'::bytea
        || convert_to(p_action, 'UTF8')), 'hex');
END
$outboxd_fn$
$def$,
$def$
CREATE OR REPLACE FUNCTION @schema@.outbox_wire_idempotency_key(p_tenant text, p_key text)
RETURNS text LANGUAGE plpgsql STABLE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $outboxd_fn$
DECLARE
    secret text;
    inner_pad bytea;
    outer_pad bytea;
    message bytea;
BEGIN
    SELECT key_secret INTO STRICT secret FROM @schema@.outboxd_installation WHERE id = 1;
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
        || convert_to(p_tenant, 'UTF8') || '\x00'::bytea
        || convert_to(p_key, 'UTF8');
    RETURN 'obx2_' || encode(sha256(outer_pad || sha256(inner_pad || message)), 'hex');
END
$outboxd_fn$
$def$,
$def$
CREATE OR REPLACE FUNCTION @schema@.outbox_intents_fill_defaults() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $outboxd_fn$
BEGIN
    -- For outboxd's own trigger only: attached to a table of a caller's own, whose
    -- columns have types of the caller's (a domain whose CHECK runs on assignment), it
    -- would run the caller's code with this function's owner's rights.
    IF TG_TABLE_SCHEMA <> @schema_name@ OR TG_TABLE_NAME <> 'outbox_intents' THEN
        RAISE EXCEPTION '% is the trigger of %.outbox_intents only, not of %.%',
            'outbox_intents_fill_defaults'::text, @schema_name@, TG_TABLE_SCHEMA, TG_TABLE_NAME
            USING ERRCODE = '42501';
    END IF;
    PERFORM @schema@.outbox_check_intent_fields(NEW.tenant, NEW.operation_id, NEW.action,
        NEW.idempotency_key, NEW.ordering_key, NEW.payload_version);
    NEW.payload_sha256 := @schema@.outbox_payload_sha256(NEW.action, NEW.payload_version,
        NEW.payload);
    NEW.requested_idempotency_key := NEW.idempotency_key;
    NEW.idempotency_key := @schema@.outbox_wire_idempotency_key(NEW.tenant,
        coalesce(NEW.idempotency_key,
                 @schema@.outbox_default_idempotency_key(NEW.tenant, NEW.operation_id,
                                                         NEW.action)));
    RETURN NEW;
END
$outboxd_fn$
$def$,
$def$
CREATE OR REPLACE FUNCTION @schema@.outbox_intents_refuse_pruned() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $outboxd_fn$
DECLARE
    placed boolean;
BEGIN
    -- For outboxd's own trigger only: attached to a table of a caller's own, whose
    -- columns have types of the caller's (a domain whose CHECK runs on assignment), it
    -- would run the caller's code with this function's owner's rights.
    IF TG_TABLE_SCHEMA <> @schema_name@ OR TG_TABLE_NAME <> 'outbox_intents' THEN
        RAISE EXCEPTION '% is the trigger of %.outbox_intents only, not of %.%',
            'outbox_intents_refuse_pruned'::text, @schema_name@, TG_TABLE_SCHEMA, TG_TABLE_NAME
            USING ERRCODE = '42501';
    END IF;
    IF EXISTS (SELECT 1 FROM @schema@.outbox_tombstones t
               WHERE t.tenant = NEW.tenant AND t.operation_id = NEW.operation_id) THEN
        RAISE EXCEPTION 'operation % of tenant % was already recorded (and pruned); call outbox_enqueue for its receipt',
            NEW.operation_id, NEW.tenant USING ERRCODE = '23505';
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        INSERT INTO @schema@.outbox_tombstones AS t (tenant, operation_id, intent_id, action,
            payload_sha256, idempotency_key, final_state, pruned_at)
        VALUES (NEW.tenant, NEW.operation_id, NEW.id, NEW.action, NEW.payload_sha256,
            NEW.idempotency_key, 'pending', clock_timestamp())
        ON CONFLICT (tenant, operation_id) DO NOTHING
        RETURNING true INTO placed;
        IF placed IS NOT TRUE THEN
            RAISE EXCEPTION 'operation % of tenant % was already recorded (and pruned); call outbox_enqueue for its receipt',
                NEW.operation_id, NEW.tenant USING ERRCODE = '23505';
        END IF;
        DELETE FROM @schema@.outbox_tombstones t
         WHERE t.tenant = NEW.tenant AND t.operation_id = NEW.operation_id;
    END IF;
    RETURN NULL;
END
$outboxd_fn$
$def$,
$def$
CREATE OR REPLACE FUNCTION @schema@.outbox_intents_notify() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp AS $outboxd_fn$
BEGIN
    PERFORM pg_notify('outboxd_intents', TG_TABLE_SCHEMA);
    RETURN NULL;
END
$outboxd_fn$
$def$,
$def$
CREATE OR REPLACE FUNCTION @schema@.outbox_enqueue_prehashed(
    p_tenant text, p_operation_id text, p_action text, p_payload jsonb,
    p_payload_version integer, p_payload_sha256 text, p_idempotency_key text,
    p_ordering_key text, p_not_before timestamptz, p_deadline timestamptz)
RETURNS TABLE (intent_id bigint, idempotency_key text, replayed boolean, state text)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $outboxd_fn$
#variable_conflict use_column
DECLARE
    new_id bigint;
    new_key text;
    existing record;
    tomb record;
BEGIN
    SELECT * INTO tomb FROM @schema@.outbox_tombstones t
     WHERE t.tenant = p_tenant AND t.operation_id = p_operation_id;
    IF FOUND THEN
        PERFORM @schema@.outbox_check_intent_fields(p_tenant, p_operation_id, p_action,
            p_idempotency_key, p_ordering_key, p_payload_version);
        IF tomb.payload_sha256
           <> @schema@.outbox_payload_sha256(p_action, p_payload_version, p_payload) THEN
            RAISE EXCEPTION 'conflict: operation % of tenant % was already recorded with a different payload (digest %)',
                p_operation_id, p_tenant, tomb.payload_sha256 USING ERRCODE = 'OB409';
        END IF;
        RETURN QUERY SELECT tomb.intent_id, tomb.idempotency_key, true, tomb.final_state;
        RETURN;
    END IF;

    INSERT INTO @schema@.outbox_intents AS i (tenant, operation_id, action, payload_version,
        payload, payload_sha256, idempotency_key, ordering_key, next_attempt_at, deadline_at)
    VALUES (p_tenant, p_operation_id, p_action, p_payload_version, p_payload,
        NULL, p_idempotency_key, p_ordering_key, coalesce(p_not_before, clock_timestamp()), p_deadline)
    ON CONFLICT ON CONSTRAINT outbox_intents_operation DO NOTHING
    RETURNING i.id, i.idempotency_key INTO new_id, new_key;
    IF new_id IS NOT NULL THEN
        RETURN QUERY SELECT new_id, new_key, false, 'pending'::text;
        RETURN;
    END IF;

    SELECT i.id, i.payload_sha256, i.idempotency_key, i.state INTO existing
      FROM @schema@.outbox_intents i WHERE i.tenant = p_tenant AND i.operation_id = p_operation_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'operation % of tenant % is being recorded or pruned concurrently; retry the transaction',
            p_operation_id, p_tenant USING ERRCODE = '40001';
    END IF;
    IF existing.payload_sha256
       <> @schema@.outbox_payload_sha256(p_action, p_payload_version, p_payload) THEN
        RAISE EXCEPTION 'conflict: operation % of tenant % was already recorded with a different payload (digest %)',
            p_operation_id, p_tenant, existing.payload_sha256 USING ERRCODE = 'OB409';
    END IF;
    RETURN QUERY SELECT existing.id, existing.idempotency_key, true, existing.state;
END
$outboxd_fn$
$def$,
$def$
CREATE OR REPLACE FUNCTION @schema@.outbox_enqueue(
    p_tenant text, p_operation_id text, p_action text, p_payload jsonb,
    p_payload_version integer DEFAULT 1, p_idempotency_key text DEFAULT NULL,
    p_ordering_key text DEFAULT NULL, p_not_before timestamptz DEFAULT NULL,
    p_deadline timestamptz DEFAULT NULL)
RETURNS TABLE (intent_id bigint, idempotency_key text, replayed boolean, state text)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $outboxd_fn$
#variable_conflict use_column
BEGIN
    PERFORM @schema@.outbox_check_intent_fields(p_tenant, p_operation_id, p_action,
        p_idempotency_key, p_ordering_key, p_payload_version);
    IF p_payload IS NULL THEN
        RAISE EXCEPTION 'invalid payload: must be a JSON object, got null' USING ERRCODE = '22023';
    END IF;
    RETURN QUERY SELECT * FROM @schema@.outbox_enqueue_prehashed(p_tenant, p_operation_id,
        p_action, p_payload, p_payload_version, NULL::text, p_idempotency_key, p_ordering_key,
        p_not_before, p_deadline);
END
$outboxd_fn$
$def$
    ];
    definition text;
BEGIN
    FOREACH definition IN ARRAY definitions LOOP
        EXECUTE pg_catalog.replace(pg_catalog.replace(definition, '@schema@', s),
                                   '@schema_name@', l);
    END LOOP;
END
$do$;

-- As in 0011: outboxd's triggers fire these two without checking EXECUTE, and nobody else
-- may attach them to a table.
REVOKE ALL ON FUNCTION outbox_intents_fill_defaults() FROM PUBLIC;
REVOKE ALL ON FUNCTION outbox_intents_refuse_pruned() FROM PUBLIC;
