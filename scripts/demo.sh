#!/usr/bin/env bash
# Installs what is needed and runs the onboarding example on its embedded default (no servers).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
pnpm exec turbo run build --filter=@dlock/quickstart... --output-logs=errors-only
node apps/quickstart/index.mjs
