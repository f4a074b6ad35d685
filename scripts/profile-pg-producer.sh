#!/usr/bin/env bash
# Profiles what recording an intent costs a producer on PostgreSQL, with pgbench (one
# client, sequential transactions, as outboxd-bench's figure (8)): a business row plus a
# plain INSERT into an unindexed table, against the same business row plus
#   - a bare INSERT into outbox_intents (the row, its indexes, CHECKs and NOTIFY trigger),
#   - outbox_enqueue_prehashed (what the Rust library calls: the insert, then the tombstone
#     check with a fresh snapshot);
# and, for the storage layout outboxd does NOT use but scripts/profile-pg-hot-path.sh
# measures for the dispatcher (identity and payload in an insert-only outbox_data, the
# dispatch state in a narrow outbox_dispatch row of its own), what it would cost producers:
#   - narrow-enqueue: the same PL/pgSQL function writing both rows,
#   - narrow-bare: a bare INSERT into outbox_data, whose AFTER INSERT row trigger writes the
#     dispatch row (how a plain INSERT by a producer would have to keep working).
# Each shape runs three times, interleaved, with synchronous_commit off (the CPU cost alone)
# and once more with it on. Used for the producer profile in docs/performance.md.
#
#   bash scripts/profile-pg-producer.sh [postgres://postgres@127.0.0.1:5432/postgres]
#
# It creates (and drops) the database outboxd_profile_producer.
set -euo pipefail
export LC_ALL=C PGOPTIONS="-c client_min_messages=warning"
cd "$(dirname "$0")/.."
for tool in psql pgbench bc; do
    command -v "$tool" >/dev/null || { echo "$tool is needed" >&2; exit 1; }
done

ADMIN_URL="${1:-postgres://postgres@127.0.0.1:5432/postgres}"
DB=outboxd_profile_producer
URL="${ADMIN_URL%/*}/$DB"
work=$(mktemp -d)
trap 'rm -rf "$work"; psql "$ADMIN_URL" -qc "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1 || true' EXIT

psql "$ADMIN_URL" -qc "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" >/dev/null
psql "$URL" -q -v ON_ERROR_STOP=1 -f migrations/postgres/0001_outbox.sql -f migrations/postgres/0002_producer_functions.sql \
    -c "CREATE TABLE bench_orders (id BIGINT PRIMARY KEY, note TEXT)" \
    -c "CREATE TABLE bench_plain_outbox (payload JSONB NOT NULL)" >/dev/null

# The narrow layout (scripts/narrow-layout.sql) beside outboxd's tables in the same database
# (its own tables, the same tombstones), with what producers would need on it.
psql "$URL" -q -v ON_ERROR_STOP=1 -f scripts/narrow-layout.sql >/dev/null
psql "$URL" -q -v ON_ERROR_STOP=1 >/dev/null <<'SQL'
-- What a plain INSERT into outbox_data would need: the dispatch row written by a trigger.
CREATE FUNCTION outbox_data_dispatch_row() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    INSERT INTO outbox_dispatch (id, tenant, action, ordering_key, next_attempt_at)
    VALUES (NEW.id, NEW.tenant, NEW.action, NEW.ordering_key, NEW.next_attempt_at);
    RETURN NULL;
END
$fn$;
-- Enabled only while narrow-bare runs (see tps below): narrow-enqueue writes the row itself.
CREATE TRIGGER outbox_data_dispatch_row AFTER INSERT ON outbox_data
    FOR EACH ROW EXECUTE FUNCTION outbox_data_dispatch_row();
CREATE TRIGGER outbox_data_notify AFTER INSERT ON outbox_data
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_intents_notify();

-- outbox_enqueue_prehashed on the narrow layout: both rows written by the function itself
-- (no row trigger), then the same tombstone check (its outcome ignored: nothing is pruned).
CREATE FUNCTION narrow_enqueue_prehashed(
    p_tenant text, p_operation_id text, p_action text, p_payload jsonb,
    p_payload_version integer, p_payload_sha256 text, p_idempotency_key text,
    p_ordering_key text, p_not_before timestamptz, p_deadline timestamptz)
RETURNS TABLE (intent_id bigint, idempotency_key text, replayed boolean, state text)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    new_id bigint;
    due timestamptz := coalesce(p_not_before, clock_timestamp());
BEGIN
    INSERT INTO outbox_data AS i (tenant, operation_id, action, payload_version, payload,
        payload_sha256, idempotency_key, ordering_key, next_attempt_at, deadline_at)
    VALUES (p_tenant, p_operation_id, p_action, p_payload_version, p_payload,
        p_payload_sha256, p_idempotency_key, p_ordering_key, due, p_deadline)
    ON CONFLICT ON CONSTRAINT outbox_data_operation DO NOTHING
    RETURNING i.id INTO new_id;
    IF new_id IS NULL THEN  -- a repeated random n: answer as a replay (digest check omitted)
        RETURN QUERY SELECT d.id, d.idempotency_key, true, 'pending'::text FROM outbox_data d
                      WHERE d.tenant = p_tenant AND d.operation_id = p_operation_id;
        RETURN;
    END IF;
    INSERT INTO outbox_dispatch (id, tenant, action, ordering_key, next_attempt_at)
    VALUES (new_id, p_tenant, p_action, p_ordering_key, due);
    PERFORM 1 FROM outbox_tombstones t WHERE t.tenant = p_tenant AND t.operation_id = p_operation_id;
    RETURN QUERY SELECT new_id, p_idempotency_key, false, 'pending'::text;
END
$fn$;
SQL

PAYLOAD="jsonb_build_object('order_id', (:n)::bigint, 'amount', 1250, 'currency', 'EUR', 'note', repeat('x', 160))"
OP="'p-' || (:client_id)::text || '-' || (:n)::text"
DIGEST="'0123456789012345678901234567890123456789012345678901234567890123'"
BUSINESS="INSERT INTO bench_orders (id, note) VALUES (:n, 'refund requested') ON CONFLICT DO NOTHING;"
cat > "$work/plain.sql" <<SQL
\set n random(1, 1000000000)
BEGIN;
$BUSINESS
INSERT INTO bench_plain_outbox (payload) VALUES ($PAYLOAD);
COMMIT;
SQL
cat > "$work/bare.sql" <<SQL
\set n random(1, 1000000000)
BEGIN;
$BUSINESS
INSERT INTO outbox_intents (tenant, operation_id, action, payload, payload_sha256, idempotency_key)
VALUES ('bench', $OP, 'bench.deliver', $PAYLOAD, $DIGEST, 'k-' || (:n)::text) ON CONFLICT DO NOTHING;
COMMIT;
SQL
cat > "$work/enqueue.sql" <<SQL
\set n random(1, 1000000000)
BEGIN;
$BUSINESS
SELECT * FROM outbox_enqueue_prehashed('bench', $OP, 'bench.deliver', $PAYLOAD, 1, $DIGEST,
    'k-' || (:n)::text, NULL, NULL, NULL);
COMMIT;
SQL

sed 's/INSERT INTO outbox_intents /INSERT INTO outbox_data /' "$work/bare.sql" > "$work/narrow-bare.sql"
sed 's/outbox_enqueue_prehashed/narrow_enqueue_prehashed/' "$work/enqueue.sql" > "$work/narrow-enqueue.sql"
SHAPES="plain bare enqueue narrow-bare narrow-enqueue"

# Commits per second of one shape; stops the script with pgbench's output if it failed.
tps() {
    local out trigger=DISABLE
    [ "$2" = narrow-bare ] && trigger=ENABLE
    psql "$URL" -qc "ALTER TABLE outbox_data $trigger TRIGGER outbox_data_dispatch_row" >/dev/null
    out=$(PGOPTIONS="$PGOPTIONS -c synchronous_commit=$1" pgbench -n -M prepared -f "$work/$2.sql" -c 1 -T 5 "$URL" 2>&1) || {
        echo "pgbench failed on $2:" >&2; echo "$out" >&2; exit 1; }
    awk '/^tps/ {print $3; exit}' <<<"$out"
}
declare -A sum
for round in 1 2 3; do
    for shape in $SHAPES; do
        t=$(tps off "$shape")
        sum[$shape]=$(echo "${sum[$shape]:-0} + $t" | bc -l)
    done
done
echo "== pgbench, 1 client, synchronous_commit=off, mean of 3 runs of 5 s (commits/s, ratio to plain)"
for shape in $SHAPES; do
    mean=$(echo "${sum[$shape]} / 3" | bc -l)
    printf '  %-48s %8.0f  %5.2f\n' "business row + $shape" "$mean" "$(echo "$mean / (${sum[plain]} / 3)" | bc -l)"
done
echo "== synchronous_commit=on, one run of 5 s each"
plain=$(tps on plain)
for shape in $SHAPES; do
    if [ "$shape" = plain ]; then v=$plain; else v=$(tps on "$shape"); fi
    printf '  %-48s %8.0f  %5.2f\n' "business row + $shape" "$v" "$(echo "$v / $plain" | bc -l)"
done
