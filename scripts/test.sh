#!/usr/bin/env bash
# The whole test suite, on SQLite and PostgreSQL.
#
# PostgreSQL: OUTBOXD_TEST_PG_URL (default postgres://postgres@127.0.0.1:5432/test). Each test
# gets a schema of its own. When the server is unreachable the PostgreSQL half is skipped
# with a loud warning (this script sets OUTBOXD_ALLOW_SKIP=1 then, and every skipped test
# says so on stderr), unless OUTBOXD_REQUIRE_POSTGRES=1 or CI=true, where that is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."

export OUTBOXD_TEST_PG_URL="${OUTBOXD_TEST_PG_URL:-postgres://postgres@127.0.0.1:5432/test}"
export RUST_BACKTRACE="${RUST_BACKTRACE:-0}"

pg_up=0
if command -v psql >/dev/null 2>&1 && psql "$OUTBOXD_TEST_PG_URL" -qAtc 'SELECT 1' >/dev/null 2>&1; then
    pg_up=1
    # Schemas left behind by interrupted earlier runs: only those created more than six
    # hours ago (the name says when: obxt_t<unix seconds>_...), so a run going on at the
    # same time on the same server keeps its schemas.
    psql "$OUTBOXD_TEST_PG_URL" -qAt -c "SELECT 'DROP SCHEMA ' || nspname || ' CASCADE;' FROM pg_namespace WHERE nspname ~ '^obxt_t[0-9]+_' AND substring(nspname from '^obxt_t([0-9]+)_')::bigint < extract(epoch from now()) - 6 * 3600" \
        | psql "$OUTBOXD_TEST_PG_URL" -q >/dev/null 2>&1 || true
fi
if [ "$pg_up" = 1 ]; then
    echo "== PostgreSQL reachable at ${OUTBOXD_TEST_PG_URL}: running both backends"
elif [ "${OUTBOXD_REQUIRE_POSTGRES:-0}" = 1 ] || [ "${CI:-}" = true ]; then
    echo "== PostgreSQL is required (OUTBOXD_REQUIRE_POSTGRES=1) but unreachable at ${OUTBOXD_TEST_PG_URL}" >&2
    exit 1
else
    echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
    echo "!!! PostgreSQL is NOT reachable at ${OUTBOXD_TEST_PG_URL}"
    echo "!!! The PostgreSQL half of the suite will be SKIPPED; only SQLite is tested."
    export OUTBOXD_ALLOW_SKIP=1
    echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
fi

if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
    echo "== Chromium and chromedriver found: the review page is tested in a headless browser"
elif [ "${OUTBOXD_REQUIRE_BROWSER:-0}" = 1 ]; then
    echo "== a browser is required (OUTBOXD_REQUIRE_BROWSER=1) but /usr/bin/chromium or /usr/bin/chromedriver is missing" >&2
    exit 1
else
    echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
    echo "!!! /usr/bin/chromium or /usr/bin/chromedriver is MISSING"
    echo "!!! The headless-browser test of the review page will be SKIPPED."
    echo "!!! (apt-get install chromium chromium-driver)"
    echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
fi

# Every skipped test appends a line here (tests/support: record_skip); printed at the end.
export OUTBOXD_SKIP_LOG="${PWD}/target/skipped-tests.log"
mkdir -p target
rm -f "$OUTBOXD_SKIP_LOG"
print_skips() {
    if [ -s "$OUTBOXD_SKIP_LOG" ]; then
        echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
        echo "!!! $(wc -l <"$OUTBOXD_SKIP_LOG") test(s) SKIPPED:"
        sed 's/^/!!!   /' "$OUTBOXD_SKIP_LOG"
        echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
    fi
}
trap print_skips EXIT

# The whole workspace: the daemon, the producer crate, the test kit and the benchmark.
cargo build --workspace --all-targets
# cargo-nextest runs each test in its own process, six at a time across all test binaries
# (.config/nextest.toml); without it, cargo test runs the binaries one after the other.
if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --workspace --all-targets --no-fail-fast
else
    echo "== cargo-nextest not found: running the suite with cargo test (slower)"
    cargo test --workspace --all-targets --no-fail-fast -- --test-threads 6
fi
