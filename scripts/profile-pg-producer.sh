#!/usr/bin/env bash
# Profiles what recording an intent costs a producer on PostgreSQL, with pgbench (one
# client, sequential transactions, as outboxd-bench's figure (8)): a business row plus a
# plain INSERT into an unindexed table, against the same business row plus
#   - a bare INSERT into outbox_intents (the row, its indexes, CHECKs and NOTIFY trigger),
#   - outbox_enqueue_prehashed (what the Rust library calls: the insert, then the tombstone
#     check with a fresh snapshot).
# Each shape runs three times, interleaved, with synchronous_commit off (the CPU cost alone)
# and once more with it on. Used for the producer profile in README → Performance.
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

# Commits per second of one shape; stops the script with pgbench's output if it failed.
tps() {
    local out
    out=$(PGOPTIONS="$PGOPTIONS -c synchronous_commit=$1" pgbench -n -M prepared -f "$work/$2.sql" -c 1 -T 5 "$URL" 2>&1) || {
        echo "pgbench failed on $2:" >&2; echo "$out" >&2; exit 1; }
    awk '/^tps/ {print $3; exit}' <<<"$out"
}
declare -A sum
for round in 1 2 3; do
    for shape in plain bare enqueue; do
        t=$(tps off "$shape")
        sum[$shape]=$(echo "${sum[$shape]:-0} + $t" | bc -l)
    done
done
echo "== pgbench, 1 client, synchronous_commit=off, mean of 3 runs of 5 s (commits/s, ratio to plain)"
for shape in plain bare enqueue; do
    mean=$(echo "${sum[$shape]} / 3" | bc -l)
    printf '  %-48s %8.0f  %5.2f\n' "business row + $shape" "$mean" "$(echo "$mean / (${sum[plain]} / 3)" | bc -l)"
done
echo "== synchronous_commit=on, one run of 5 s each"
plain=$(tps on plain)
for shape in plain bare enqueue; do
    if [ "$shape" = plain ]; then v=$plain; else v=$(tps on "$shape"); fi
    printf '  %-48s %8.0f  %5.2f\n' "business row + $shape" "$v" "$(echo "$v / $plain" | bc -l)"
done
