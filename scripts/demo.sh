#!/usr/bin/env bash
# Installs what is needed, builds the demo app and runs it on its embedded default: in-memory locks shared by
# worker threads, PGlite as the database; no server needed. Options are passed on (see `--help`), e.g.
#   bash scripts/demo.sh --lock redis://127.0.0.1:6379 --db postgres://postgres@127.0.0.1:5432/test
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
pnpm exec turbo run build --filter=@dlock/demo... --output-logs=errors-only >&2
exec node apps/demo/dist/cli.js "$@"
