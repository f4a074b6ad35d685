#!/usr/bin/env bash
# Writes the console screenshots in docs/console/ (dashboard.png, intents.png) from a small
# seeded SQLite database, with the same headless Chromium harness as the browser tests.
# Needs /usr/bin/chromium and /usr/bin/chromedriver (apt-get install chromium chromium-driver).
set -euo pipefail
cd "$(dirname "$0")/.."
OUTBOXD_REQUIRE_BROWSER=1 cargo test --test it -- --ignored --exact console::browser::screenshots
ls -l docs/console/*.png
