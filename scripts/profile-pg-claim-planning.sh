#!/usr/bin/env bash
# Where the PostgreSQL claim statement's planning time goes (decision 0018): the claim of
# src/store/postgres/claim_sql.rs (`CLAIM_DUE_SQL`) as it ships, its tenant walk alone, its
# per-action seek alone (the walk replaced by a bound array of tenants), and a one-tenant
# claim without walk or per-action LATERAL. Each is prepared with
# `plan_cache_mode = force_custom_plan` (what an unnamed statement gets: a plan per
# execution) and run 30 times as `EXPLAIN (ANALYZE, SUMMARY) EXECUTE` inside a rolled-back
# transaction; the medians of "Planning Time" and "Execution Time" are printed.
#
#   bash scripts/profile-pg-claim-planning.sh [postgres://postgres@127.0.0.1:5432/postgres] [rounds]
#
# It creates (and drops) the database outboxd_planning: every migration in
# migrations/postgres, 50,000 intents of 5 tenants, 45,000 of them delivered.
#
# Then, why a plan kept across executions scans the table: claims of 200 from one tenant's
# 100,000 pending intents beside 100,000 delivered ones (executions 2-6 of six; the first is
# not printed): the claim as shipped with `force_generic_plan` and the table analyzed (with
# JIT compilation as the server has it, then with `jit = off`), the same with
# `force_custom_plan` (what ships), the claim with its limits written as literals
# (generic, table analyzed), and that one with its plan made on the empty table, which is
# then filled without an ANALYZE (autovacuum off for it).
#
# Last, the claim as it ships (decision 0021: generic plan, enable_seqscan and jit off) with
# its plan made on the empty table, then one tenant's 100,000 pending intents, or those
# beside 500 tenants of 20 each (the walk starting at the beginning, after the big tenant,
# or after a small one).
#
# The per-action seek is measured for one tenant (t2), the claim walks all five. Any
# database named outboxd_planning on that server is dropped, at the start and at the end.
# For a disposable server only: it needs CREATEDB, writes about 250,000 rows, and runs
# claims of up to about a second. Needs python3 and gawk (asort). It prints the server's
# version and the settings that change its figures first.
set -euo pipefail
export PGOPTIONS="${PGOPTIONS:-} -c client_min_messages=warning"
cd "$(dirname "$0")/.."

ADMIN_URL="${1:-postgres://postgres@127.0.0.1:5432/postgres}"
ROUNDS="${2:-3}"
DB=outboxd_planning
URL="${ADMIN_URL%/*}/$DB"
work=$(mktemp -d)
trap 'rm -rf "$work"; psql "$ADMIN_URL" -qc "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1 || true' EXIT

# A new database with every migration; autovacuum off for the intents with "$1" = manual.
fresh() {
    psql "$ADMIN_URL" -qc "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" >/dev/null
    for f in migrations/postgres/*.sql; do
        PGOPTIONS="-c client_min_messages=error" psql "$URL" -1 -q -v ON_ERROR_STOP=1 -f "$f" >/dev/null || { echo "migration $f failed" >&2; exit 1; }
    done
    if [ "${1:-}" = manual ]; then
        psql "$URL" -qc "ALTER TABLE outbox_intents SET (autovacuum_enabled = false)" >/dev/null
    fi
}

fresh
psql "$URL" -At -c "SELECT 'server ' || version()" -c "SELECT 'jit ' || current_setting('jit') || ', jit_above_cost ' || current_setting('jit_above_cost') || ', plan_cache_mode ' || current_setting('plan_cache_mode')"
fresh
psql "$URL" -q \
    -c "INSERT INTO outbox_intents (tenant, operation_id, action, payload)
        SELECT 't' || (g % 5), 'op-' || g, 'bench.deliver',
               jsonb_build_object('n', g, 'note', repeat('x', 160))
        FROM generate_series(1, 50000) g" \
    -c "UPDATE outbox_intents SET state = 'delivered', finished_at = now() WHERE id % 10 <> 0" \
    -c "VACUUM ANALYZE outbox_intents" >/dev/null

python3 - "$work" <<'PY'
import re, sys
work = sys.argv[1]
src = open('src/store/postgres/claim_sql.rs').read()
claim = re.search(r'CLAIM_DUE_SQL: &str = r#"(.*?)"#;', src, re.S).group(1)
cut = claim.index('), due AS (')
params = '$1::timestamptz, $2::text[], $3::int, $4::text, $5::bigint, $7::int'
walk = claim[:cut] + ')\nSELECT tenant, ' + params + ' FROM turns LIMIT $3'
walk = walk.replace('$6 COLLATE', '$6::text COLLATE')
seek = ('WITH turns AS (SELECT unnest($6::text[]) AS tenant), due AS ('
        + claim[cut + len('), due AS ('):])
one = '''WITH due AS (
    SELECT i.id FROM outbox_intents i
    WHERE i.state = 'pending' AND i.tenant = $6 AND i.action = ANY($2) AND i.next_attempt_at <= $1
    ORDER BY i.next_attempt_at, i.id LIMIT $3 FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE outbox_intents i SET state = 'in_flight', lease_owner = $4,
        lease_expires_at = now() + make_interval(secs => $5::double precision / 1000),
        fencing_token = i.fencing_token + 1, attempt_count = i.attempt_count + 1,
        attempt_started_at = now(), updated_at = now()
    FROM due WHERE i.id = due.id RETURNING i.*
)
SELECT id, $7::int, $8::boolean FROM claimed'''
literal = claim.replace('LIMIT $7', 'LIMIT 200').replace('LIMIT $3', 'LIMIT 200')
# The shipped claim has three limits (two per-tenant shares, one batch); if that changes,
# this profile no longer measures what decision 0018 says.
assert literal.count('LIMIT 200') == 3 and '$3' in claim and cut > 0, 'CLAIM_DUE_SQL changed shape'
for name, text in [('claim', claim), ('walk', walk), ('seek', seek), ('one', one),
                   ('literal', literal)]:
    open(f'{work}/{name}.sql', 'w').write(text)
PY

# $1 statement file, $2 type of $6, $3 value of $6
median_times() {
    {
        echo "SET plan_cache_mode = force_custom_plan;"
        echo "PREPARE c(timestamptz, text[], int, text, bigint, $2, int, boolean) AS $(cat "$1");"
        for _ in $(seq 30); do
            echo "BEGIN; EXPLAIN (ANALYZE, SUMMARY, TIMING OFF, COSTS OFF) EXECUTE c(now(), '{bench.deliver}', 5, 'profile', 30000, '$3', 5, false); ROLLBACK;"
        done
    } | psql -q -v ON_ERROR_STOP=1 "$URL" | gawk '/Planning Time/ {p[np++] = $3} /Execution Time/ {e[ne++] = $3}
        END { if (np == 0 || ne == 0) { print "no timings: the statement failed"; exit 1 }
              asort(p); asort(e); printf "planning %.3f ms, execution %.3f ms\n", p[int(np / 2) + 1], e[int(ne / 2) + 1] }'
}

for round in $(seq "$ROUNDS"); do
    echo "round $round"
    printf '  %-44s' "claim as shipped:";            median_times "$work/claim.sql" text t2
    printf '  %-44s' "its tenant walk alone:";       median_times "$work/walk.sql" text t2
    printf '  %-44s' "its per-action seek alone:";   median_times "$work/seek.sql" 'text[]' '{t2}'
    printf '  %-44s' "one tenant, no walk, no LATERAL:"; median_times "$work/one.sql" text t2
done

# $1 statement file, $2 plan_cache_mode, $3 SQL run between the first execution and the rest,
# $4 the tenant whose turn it was ($6; '' for the start of the walk)
kept_plan() {
    local turn="${4:-}"
    {
        echo "SET plan_cache_mode = $2;"
        echo "PREPARE c(timestamptz, text[], int, text, bigint, text, int, boolean) AS $(cat "$1");"
        echo "BEGIN; EXPLAIN (ANALYZE, SUMMARY, COSTS OFF) EXECUTE c(now(), '{bench.deliver}', 200, 'profile', 30000, '$turn', 200, false); ROLLBACK;"
        echo "$3"
        for _ in $(seq 5); do
            echo "BEGIN; EXPLAIN (ANALYZE, SUMMARY, COSTS OFF) EXECUTE c(now(), '{bench.deliver}', 200, 'profile', 30000, '$turn', 200, false); ROLLBACK;"
        done
    } | psql -q -v ON_ERROR_STOP=1 "$URL" | gawk '/Planning Time/ {if (n++) p = p " " $3} /Execution Time/ {if (m++) e = e " " $3}
        /Seq Scan on outbox_intents i_1 \(actual/ {seq++} /Seq Scan on outbox_intents/ {any++}
        END { if (m < 2) { print "no timings: the statement failed"; exit 1 }
              printf "planning%s ms; execution%s ms; executions whose UPDATE scanned the whole table (of six): %d; sequential scans of the table in all: %d\n", p, e, seq, any }'
}

fill="INSERT INTO outbox_intents (tenant, operation_id, action, payload)
      SELECT 't1', 'op-' || g, 'bench.deliver', jsonb_build_object('n', g, 'note', repeat('x', 160))
      FROM generate_series(1, 200000) g;
      UPDATE outbox_intents SET state = 'delivered', finished_at = now() WHERE id % 2 = 0;"

echo "kept plans, claims of 200 of 100,000 pending"
fresh manual
psql "$URL" -q -c "$fill" -c "VACUUM ANALYZE outbox_intents" >/dev/null
printf '  %-44s' "as shipped, generic, table analyzed:"; kept_plan "$work/claim.sql" force_generic_plan ""
printf '  %-44s' "as shipped, generic, analyzed, jit off:"; kept_plan "$work/claim.sql" "force_generic_plan; SET jit = off" ""
printf '  %-44s' "as shipped, custom (what ships):";     kept_plan "$work/claim.sql" force_custom_plan ""
printf '  %-44s' "limits as literals, generic, analyzed:"; kept_plan "$work/literal.sql" force_generic_plan ""
fresh manual
printf '  %-44s' "literals, generic, made on the empty table:"; kept_plan "$work/literal.sql" force_generic_plan "$fill"

# The claim as it ships since decision 0021: kept prepared on a generic plan, in a
# transaction that sets what CLAIM_BEGIN_SQL sets. Its plan is made on the empty table.
shipped="force_generic_plan; SET enable_seqscan = off; SET jit = off"
skewed="INSERT INTO outbox_intents (tenant, operation_id, action, payload)
        SELECT 'big', 'op-' || g, 'bench.deliver', jsonb_build_object('n', g, 'note', repeat('x', 160))
        FROM generate_series(1, 100000) g;
        INSERT INTO outbox_intents (tenant, operation_id, action, payload)
        SELECT 's' || lpad((g % 500)::text, 3, '0'), 'op-' || g, 'bench.deliver',
               jsonb_build_object('n', g, 'note', repeat('x', 160))
        FROM generate_series(1, 10000) g;"
echo "kept plans as shipped (decision 0021), made on the empty table, then filled"
fresh manual
printf '  %-44s' "one tenant, 200,000 rows, 100,000 pending:"; kept_plan "$work/claim.sql" "$shipped" "$fill"
fresh manual
printf '  %-44s' "100,000 of one tenant, 500 x 20, from start:"; kept_plan "$work/claim.sql" "$shipped" "$skewed"
fresh manual
printf '  %-44s' "the same, turn after the big tenant:"; kept_plan "$work/claim.sql" "$shipped" "$skewed" big
fresh manual
printf '  %-44s' "the same, turn after a small tenant:"; kept_plan "$work/claim.sql" "$shipped" "$skewed" s250
