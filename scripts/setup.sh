#!/usr/bin/env bash
# Installs the toolchain and the workspace's dependencies. Idempotent and quick when everything is present,
# so the test and demo commands can call it every time.
set -euo pipefail
cd "$(dirname "$0")/.."

PNPM_VERSION="$(node -p "require('./package.json').packageManager.split('@')[1]")"

if ! command -v pnpm >/dev/null 2>&1 || [ "$(pnpm --version 2>/dev/null)" != "$PNPM_VERSION" ]; then
  echo "[setup] installing pnpm@$PNPM_VERSION" >&2
  npm install --global --no-fund --no-audit "pnpm@$PNPM_VERSION" >/dev/null
fi

# node-gyp cannot download Node's headers here (no internet): build native addons against the local ones.
if [ -d /usr/include/node ]; then export npm_config_nodedir=/usr; fi

stamp=node_modules/.dlock-install-stamp
want="$( { cat pnpm-lock.yaml pnpm-workspace.yaml package.json packages/*/package.json apps/*/package.json bench/package.json 2>/dev/null || true; } | sha1sum | cut -c1-40)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "[setup] dependencies up to date" >&2
else
  echo "[setup] pnpm install" >&2
  if [ -f pnpm-lock.yaml ]; then pnpm install --frozen-lockfile; else pnpm install; fi
  echo "$want" >"$stamp"
fi
