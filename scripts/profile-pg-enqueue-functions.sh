#!/usr/bin/env bash
# What one `outbox_enqueue` transaction costs the server before and after a migration,
# with pgbench: one client, `-M prepared`, `synchronous_commit = off` (the CPU cost, not the
# WAL flush), a ~220-byte payload with three containers. Two databases get the migrations
# up to BEFORE and up to AFTER; the two, and a plain INSERT of the same payload into a
# table of its own, run ROUNDS times interleaved, SECS seconds each. Then, per database,
# 3,000 transactions with `track_functions = all` give each function's mean self and total
# time per call (pg_stat_user_functions). Used for the producer figures in
# docs/performance.md.
#
#   bash scripts/profile-pg-enqueue-functions.sh [BEFORE=9] [AFTER=10] [ROUNDS=5] [SECS=5]
#
# It creates (and drops) the databases outboxd_profile_enq_before and _after.
set -euo pipefail
export LC_ALL=C PGOPTIONS="-c client_min_messages=warning"
cd "$(dirname "$0")/.."
for tool in psql pgbench; do
    command -v "$tool" >/dev/null || { echo "$tool is needed" >&2; exit 1; }
done
BEFORE=${1:-9} AFTER=${2:-10} ROUNDS=${3:-5} SECS=${4:-5}
ADMIN_URL=${OUTBOXD_PROFILE_ADMIN_URL:-postgres://postgres@127.0.0.1:5432/postgres}
work=$(mktemp -d)
cleanup() {
    rm -rf "$work"
    for db in before after; do
        psql "$ADMIN_URL" -qc "DROP DATABASE IF EXISTS outboxd_profile_enq_$db" >/dev/null 2>&1 || true
    done
}
trap cleanup EXIT

make_db() { # name, last migration
    local db=outboxd_profile_enq_$1 url="${ADMIN_URL%/*}/outboxd_profile_enq_$1"
    psql "$ADMIN_URL" -qc "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null
    psql "$ADMIN_URL" -qc "ALTER DATABASE $db SET synchronous_commit = off" >/dev/null
    for f in migrations/postgres/[0-9][0-9][0-9][0-9]_*.sql; do
        local v; v=$(basename "$f"); v=$((10#${v%%_*}))
        [ "$v" -le "$2" ] && psql "$url" -q -1 -v ON_ERROR_STOP=1 -f "$f" >/dev/null
    done
    psql "$url" -qc "CREATE TABLE bench_plain (id bigserial PRIMARY KEY, tenant text, operation_id text, action text, payload jsonb, UNIQUE (tenant, operation_id))" >/dev/null
}
make_db before "$BEFORE"
make_db after "$AFTER"

payload='{"order_id": "ord-1234567890", "amount": {"value": 12.50, "currency": "EUR"}, "reason": "damaged in transit", "lines": [1, 2, 3], "customer": "cus-0987654321", "note": "refund approved by support agent"}'
cat >"$work/enqueue.sql" <<SQL
\set op random(1, 1000000000000)
BEGIN;
SELECT * FROM outbox_enqueue('acme', 'op-' || :op, 'issue_refund', '$payload');
COMMIT;
SQL
cat >"$work/plain.sql" <<SQL
\set op random(1, 1000000000000)
BEGIN;
INSERT INTO bench_plain (tenant, operation_id, action, payload) VALUES ('acme', 'op-' || :op, 'issue_refund', '$payload');
COMMIT;
SQL

latency() { # script, database
    pgbench "${ADMIN_URL%/*}/outboxd_profile_enq_$2" -n -M prepared -c 1 -T "$SECS" -f "$work/$1.sql" 2>&1 \
        | sed -n 's/^latency average = //p'
}
echo "latency per transaction (schema $BEFORE | schema $AFTER | plain INSERT)"
for round in $(seq 1 "$ROUNDS"); do
    echo "round $round: $(latency enqueue before) | $(latency enqueue after) | $(latency plain before)"
done

for db in before after; do
    url="${ADMIN_URL%/*}/outboxd_profile_enq_$db"
    psql "$ADMIN_URL" -qc "ALTER DATABASE outboxd_profile_enq_$db SET track_functions = 'all'" >/dev/null
    psql "$url" -qAtc "SELECT pg_stat_reset()" >/dev/null
    pgbench "$url" -n -M prepared -c 1 -t 3000 -f "$work/enqueue.sql" >/dev/null 2>&1
    sleep 1  # the statistics reach the cumulative view when the session ends
    echo "functions, $db (schema $([ $db = before ] && echo "$BEFORE" || echo "$AFTER")): name | calls | self µs | total µs per call"
    psql "$url" -qAtc "SELECT funcname || ' | ' || calls || ' | ' || round((self_time * 1000 / calls)::numeric, 1)
                              || ' | ' || round((total_time * 1000 / calls)::numeric, 1)
                         FROM pg_stat_user_functions ORDER BY total_time DESC"
done
