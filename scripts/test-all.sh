#!/usr/bin/env bash
# The one command that installs everything, starts the servers the tests need and runs every check and test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/services.sh start
bash scripts/chromium.sh
rm -f packages/*/.vitest-results.json apps/*/.vitest-results.json docs/.vitest-results.json
status=0
pnpm exec turbo run build typecheck --output-logs=errors-only || status=$?
if [ "$status" = 0 ]; then pnpm exec biome ci . || status=$?; fi
# The documentation site (API reference from the sources, charts from bench/results): its tests in docs/ (every
# README and page code block compiled and run, the built site in Chromium) run with the others below.
docs_log="${TMPDIR:-/tmp}/dlock-docs-build.log"
if [ "$status" = 0 ]; then pnpm docs:build >"$docs_log" 2>&1 || { status=$?; tail -n 40 "$docs_log"; }; fi
if [ "$status" = 0 ]; then pnpm exec turbo run test --concurrency=1 --output-logs=full || status=$?; fi
if [ "$status" = 0 ]; then bash scripts/pack-check.sh || status=$?; fi
node scripts/test-summary.mjs || status=$((status == 0 ? 1 : status))
exit "$status"
