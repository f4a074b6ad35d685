#!/usr/bin/env bash
# Profiles the dispatcher's PostgreSQL hot path with pgbench, without HTTP and without the
# daemon: the claim statement and the outcome statement of src/store/postgres/claims.rs in
# their shape (claim N due intents with FOR UPDATE SKIP LOCKED → record N deliveries with
# their attempt rows), against the raw two-statement queue of outboxd-bench (2a), and the
# same shape with one piece of the schema removed, to show what each costs; and, last, two
# storage layouts that are NOT what outboxd uses, to measure what changing it would buy: the
# mutable dispatch state in a narrow table of its own (identity, payload and uniqueness in
# an insert-only table), with and without a separate attempt row per delivery. Also the
# field checks of migration 0009 against the CHECKs before it, with small and with large
# payloads.
#
#   bash scripts/profile-pg-hot-path.sh [postgres://postgres@127.0.0.1:5432/postgres]
#
# It creates (and drops) the database outboxd_profile. Figures are intents (rows) per second
# = pgbench tps × batch, 4 clients, batch 100. Used in docs/performance.md.
set -euo pipefail
export PGOPTIONS="-c client_min_messages=warning"
cd "$(dirname "$0")/.."

ADMIN_URL="${1:-postgres://postgres@127.0.0.1:5432/postgres}"
DB=outboxd_profile
URL="${ADMIN_URL%/*}/$DB"
ROWS=200000
BATCH=100
CLIENTS=4
TXS=$((40000 / BATCH / CLIENTS))
work=$(mktemp -d)
trap 'rm -rf "$work"; psql "$ADMIN_URL" -qc "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1 || true' EXIT

# A new database at schema 0002 (the field CHECKs as they were before 0009) with $ROWS pending intents. Optional: the number of rows and
# the SQL of each payload's `note` (`g` is the row number).
fresh() {
    local rows=${1:-$ROWS} note=${2:-"repeat('x', 160)"}
    psql "$ADMIN_URL" -qc "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" >/dev/null
    psql "$URL" -q -f migrations/postgres/0001_outbox.sql -f migrations/postgres/0002_producer_functions.sql >/dev/null
    psql "$URL" -q -c "INSERT INTO outbox_intents (tenant, operation_id, action, payload)
        SELECT 't1', 'op-' || g, 'bench.deliver',
               jsonb_build_object('n', g, 'amount', 1250, 'note', $note)
        FROM generate_series(1, $rows) g" -c "VACUUM ANALYZE outbox_intents" >/dev/null
}
# Migration 0009: the field CHECKs become a trigger on writes of those fields, which the
# dispatcher's statements never make.
checks_when_written() {
    psql "$URL" -q -1 -v ON_ERROR_STOP=1 -f migrations/postgres/0009_field_checks_when_written.sql >/dev/null
}

# The dispatcher's two statements (claim; outcome with the attempt row), as in claims.rs.
cat > "$work/claim.sql" <<'SQL'
WITH due AS (
    SELECT i.id FROM outbox_intents i
    WHERE i.state = 'pending' AND i.next_attempt_at <= now() AND i.action = ANY('{bench.deliver}')
      AND (i.ordering_key IS NULL OR NOT EXISTS (SELECT 1 FROM outbox_intents e WHERE e.tenant = i.tenant
           AND e.ordering_key = i.ordering_key AND e.id < i.id AND e.state IN ('pending', 'in_flight', 'unknown')))
    ORDER BY i.next_attempt_at, i.id LIMIT :batch FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE outbox_intents i SET state = 'in_flight', lease_owner = 'profile',
        lease_expires_at = now() + interval '30 s', fencing_token = i.fencing_token + 1,
        attempt_count = i.attempt_count + 1, attempt_started_at = now(), updated_at = now()
    FROM due WHERE i.id = due.id RETURNING i.*
)
SELECT coalesce(array_agg(c.id), '{}') AS ids, coalesce(array_agg(c.fencing_token), '{}') AS toks,
       max(length(c.payload::text)) AS plen FROM claimed c \gset
SQL
cat > "$work/outcome.sql" <<'SQL'
WITH o AS (SELECT * FROM unnest(:ids::text::bigint[], :toks::text::bigint[]) AS o(intent_id, token)),
upd AS (
    UPDATE outbox_intents i SET state = 'delivered', lease_owner = NULL, lease_expires_at = NULL,
        attempt_started_at = NULL, provider_ref = 'ref_' || i.id, last_http_status = 200,
        first_sent_at = coalesce(i.first_sent_at, now()), finished_at = now(), updated_at = now()
    FROM o WHERE i.id = o.intent_id AND i.fencing_token = o.token AND i.state = 'in_flight'
    RETURNING i.id, i.tenant
), att AS (
    INSERT INTO outbox_attempts (intent_id, attempt_number, fencing_token, owner, started_at,
                                 ended_at, class, http_status, provider_ref, duration_ms)
    SELECT i.id, i.attempt_count, i.fencing_token, i.lease_owner, i.attempt_started_at, now(),
           'delivered', 200, 'ref_' || i.id, 1
    FROM o JOIN upd ON upd.id = o.intent_id JOIN outbox_intents i ON i.id = o.intent_id
)
SELECT count(*) FROM upd;
SQL
cat "$work/claim.sql" "$work/outcome.sql" > "$work/dispatcher.sql"

cat > "$work/raw.sql" <<'SQL'
WITH c AS (SELECT id FROM bench_raw_queue WHERE state = 'pending' ORDER BY id LIMIT :batch FOR UPDATE SKIP LOCKED),
u AS (UPDATE bench_raw_queue q SET state = 'in_flight' FROM c WHERE q.id = c.id RETURNING q.id)
SELECT coalesce(array_agg(id), '{}') AS ids FROM u \gset
UPDATE bench_raw_queue SET state = 'done' WHERE id = ANY(:ids::text::bigint[]);
SQL

run() {
    local label=$1 script=$2
    local out tps
    out=$(pgbench -n -M prepared -f "$script" -D batch=$BATCH -c $CLIENTS -j 2 -t $TXS "$URL" 2>&1) || {
        echo "pgbench failed on $label:" >&2; echo "$out" >&2; exit 1; }
    tps=$(awk '/^tps/ {print $3; exit}' <<<"$out")
    printf '  %-62s %8.0f per s\n' "$label" "$(echo "$tps * $BATCH" | bc -l)"
}

echo "== pgbench, $CLIENTS clients, batch $BATCH, $((TXS * CLIENTS * BATCH)) intents per figure"
fresh
psql "$URL" -q -c "CREATE TABLE bench_raw_queue (id BIGSERIAL PRIMARY KEY, state TEXT NOT NULL, payload JSONB NOT NULL)" \
    -c "CREATE INDEX bench_raw_pending ON bench_raw_queue (id) WHERE state = 'pending'" \
    -c "INSERT INTO bench_raw_queue (state, payload) SELECT 'pending', jsonb_build_object('n', g, 'amount', 1250, 'note', repeat('x', 160)) FROM generate_series(1, $ROWS) g" \
    -c "VACUUM ANALYZE bench_raw_queue" >/dev/null
run "raw queue: claim + mark done, plain table (2a)" "$work/raw.sql"
run "dispatcher: claim → outcome + attempt row (2b's SQL)" "$work/dispatcher.sql"
fresh
psql "$URL" -qc "ALTER TABLE outbox_intents DROP CONSTRAINT outbox_intents_operation" >/dev/null
run "  without the (tenant, operation_id) unique index" "$work/dispatcher.sql"
fresh
psql "$URL" -qc "DROP INDEX outbox_intents_leases, outbox_intents_finished" >/dev/null
run "  without the lease and finished indexes" "$work/dispatcher.sql"
fresh
psql "$URL" -qc "ALTER TABLE outbox_intents DROP CONSTRAINT outbox_intents_action_check, DROP CONSTRAINT outbox_intents_payload_sha256_check, ADD CONSTRAINT old_action CHECK (action ~ '^[A-Za-z0-9_.:-]{1,128}\$'), ADD CONSTRAINT old_sha CHECK (payload_sha256 ~ '^[0-9a-f]{64}\$')" >/dev/null
run "  with the earlier bounded-repetition CHECK regexes" "$work/dispatcher.sql"
fresh
psql "$URL" -qc "DROP INDEX outbox_intents_leases" -c "CREATE INDEX outbox_intents_leases ON outbox_intents (lease_expires_at) WHERE state = 'in_flight'" >/dev/null
run "  with the earlier lease index (WHERE state = 'in_flight')" "$work/dispatcher.sql"
fresh
checks_when_written
run "  with the field checks of migration 0009 (no CHECK on UPDATE)" "$work/dispatcher.sql"

# Payloads of about 20 KB that do not compress away (stored out of line in TOAST): every
# CHECK on UPDATE reads the payload back for `jsonb_typeof(payload)`.
BIG_ROWS=60000
BIG_NOTE="(SELECT string_agg(md5(g::text || k::text), '') FROM generate_series(1, 625) k)"
echo "== payloads of about 20 KB, $BIG_ROWS rows"
fresh $BIG_ROWS "$BIG_NOTE"
run "dispatcher, field CHECKs (schema 0001-0002, as before 0009)" "$work/dispatcher.sql"
fresh $BIG_ROWS "$BIG_NOTE"
checks_when_written
run "dispatcher, field checks of migration 0009" "$work/dispatcher.sql"

# --- Not outboxd's layout: what a narrow dispatch-state table would buy. ----------------
# scripts/narrow-layout.sql, with the attempts table of 0001_outbox.sql.
cat scripts/narrow-layout.sql - > "$work/narrow_schema.sql" <<'SQL'
CREATE TABLE outbox_attempts (
    id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    intent_id BIGINT NOT NULL, attempt_number INTEGER NOT NULL, fencing_token BIGINT NOT NULL,
    owner TEXT NOT NULL, started_at TIMESTAMPTZ NOT NULL, ended_at TIMESTAMPTZ, class TEXT,
    http_status INTEGER, error TEXT, provider_ref TEXT, duration_ms BIGINT);
CREATE INDEX outbox_attempts_intent ON outbox_attempts (intent_id, attempt_number);
SQL

# The same claim on outbox_dispatch, its payload read from outbox_data.
sed -e 's/outbox_intents/outbox_dispatch/g' -e 's/c\.payload::text/x.payload::text/' \
    -e 's/FROM claimed c \\gset/FROM claimed c JOIN outbox_data x ON x.id = c.id \\gset/' \
    "$work/claim.sql" > "$work/narrow_claim.sql"
sed 's/outbox_intents/outbox_dispatch/g' "$work/outcome.sql" | cat "$work/narrow_claim.sql" - > "$work/narrow.sql"


# outboxd's layout, with the delivery's attempt kept in the intent row instead.
cat > "$work/inline_outcome.sql" <<'SQL'
WITH o AS (SELECT * FROM unnest(:ids::text::bigint[], :toks::text::bigint[]) AS o(intent_id, token))
UPDATE outbox_intents i SET state = 'delivered', lease_owner = NULL, lease_expires_at = NULL,
    provider_ref = 'ref_' || i.id, last_http_status = 200,
    first_sent_at = coalesce(i.first_sent_at, now()), finished_at = now(), updated_at = now(),
    attempt_started_at = NULL, last_attempt_started_at = i.attempt_started_at,
    last_attempt_class = 'delivered', last_attempt_ended_at = now(), last_attempt_duration_ms = 1
FROM o WHERE i.id = o.intent_id AND i.fencing_token = o.token AND i.state = 'in_flight';
SQL
cat "$work/claim.sql" "$work/inline_outcome.sql" > "$work/inline.sql"
# As above, with the delivery's attempt kept in the state row (last_attempt_*) instead of
# an outbox_attempts row: the fewest writes a delivery can take (claim, outcome), as the
# raw queue does.
sed 's/outbox_intents/outbox_dispatch/g' "$work/inline_outcome.sql" | cat "$work/narrow_claim.sql" - > "$work/narrow_inline.sql"

fresh_narrow() {
    psql "$ADMIN_URL" -qc "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" >/dev/null
    psql "$URL" -q -v ON_ERROR_STOP=1 -f "$work/narrow_schema.sql" \
        -c "ALTER TABLE outbox_dispatch ADD COLUMN last_attempt_started_at TIMESTAMPTZ,
                ADD COLUMN last_attempt_class TEXT,
                ADD COLUMN last_attempt_ended_at TIMESTAMPTZ, ADD COLUMN last_attempt_duration_ms BIGINT" \
        -c "INSERT INTO outbox_data (tenant, operation_id, action, payload, payload_sha256, idempotency_key)
            SELECT 't1', 'op-' || g, 'bench.deliver',
                   jsonb_build_object('n', g, 'amount', 1250, 'note', repeat('x', 160)),
                   repeat('a', 64), 'k-' || g
            FROM generate_series(1, $ROWS) g" \
        -c "INSERT INTO outbox_dispatch (id, tenant, action, ordering_key, next_attempt_at)
            SELECT id, tenant, action, ordering_key, next_attempt_at FROM outbox_data" \
        -c "VACUUM ANALYZE" >/dev/null
}
echo "== not outboxd's layout (what changing it would buy)"
fresh
psql "$URL" -qc "ALTER TABLE outbox_intents ADD COLUMN last_attempt_started_at TIMESTAMPTZ,
        ADD COLUMN last_attempt_class TEXT, ADD COLUMN last_attempt_ended_at TIMESTAMPTZ,
        ADD COLUMN last_attempt_duration_ms BIGINT" >/dev/null
run "outboxd's table, attempt kept in the intent row" "$work/inline.sql"
fresh_narrow
run "narrow state table, claim → outcome + attempt row" "$work/narrow.sql"
fresh_narrow
run "narrow state table, attempt kept in the state row" "$work/narrow_inline.sql"
