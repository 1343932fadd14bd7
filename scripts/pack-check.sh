#!/usr/bin/env bash
# Checks that each published package installs on its own, from its packed tarball, into a project outside the
# workspace with plain npm, and that its entry points and types resolve (ESM + NodeNext, as users compile).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work=$(mktemp -d /tmp/dlock-pack-check.XXXXXX)
trap 'rm -rf "$work"' EXIT

for pkg in packages/*/; do
  if [ "$(node -p "require('./${pkg}package.json').private === true")" = true ]; then continue; fi
  (cd "$pkg" && pnpm pack --pack-destination "$work/tarballs" >/dev/null)
done

mkdir -p "$work/app" && cd "$work/app"
cat >package.json <<'JSON'
{ "name": "pack-check", "private": true, "type": "module" }
JSON
# Peers the smoke test needs come from the registry, as they would for a user.
npm install --no-audit --no-fund --loglevel=error "$work"/tarballs/*.tgz @opentelemetry/api@1 pg@8 kysely@0.28 redis@5 etcd3@1 node-zookeeper-client@1 "typescript@$(node -p "require('$root/node_modules/typescript/package.json').version")" @types/node@20 @types/pg@8 >/dev/null

cp "$root/scripts/pack-check/smoke.ts" "$root/scripts/pack-check/adapters.ts" .
# The root README's example, exactly as written there, compiled and run like the rest.
awk '/^```ts$/ { on = 1; next } on && /^```$/ { exit } on { print }' "$root/README.md" >readme-example.ts
cat >tsconfig.json <<'JSON'
{ "compilerOptions": { "module": "NodeNext", "moduleResolution": "NodeNext", "target": "ES2022", "strict": true,
  "lib": ["ES2023", "ESNext.Disposable"], "types": ["node"], "outDir": "out", "skipLibCheck": false } }
JSON
npx tsc -p tsconfig.json
node out/smoke.js
node out/adapters.js
DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}" node out/readme-example.js
echo "[pack-check] the root README's example ran" >&2

# Redis client users, each in a fresh project with only @dlock/core, @dlock/redis and the client they chose, all
# through plain npm (no --legacy-peer-deps, no --force): the optional peer ranges must let npm resolve the tree, and
# keep resolving it on every later install (the failure being ERESOLVE on the next `npm install` of anything).
typescript="typescript@$(node -p "require('$root/node_modules/typescript/package.json').version")"
redis_user() { # <project, also its program in scripts/pack-check/> <client spec> <client it must not get> <label>
  local dir="$work/$1"
  mkdir -p "$dir" && cd "$dir"
  echo '{ "name": "pack-check-redis-user", "private": true, "type": "module" }' >package.json
  local npm=(npm install --no-audit --no-fund --loglevel=error)
  "${npm[@]}" "$work"/tarballs/dlock-core-*.tgz "$work"/tarballs/dlock-redis-*.tgz "$2" >/dev/null
  if [ -e "node_modules/$3" ]; then
    echo "[pack-check] $4: npm installed $3, which this user did not ask for" >&2; exit 1
  fi
  # Later installs: one that adds packages (the compiler), one that only re-resolves the tree.
  "${npm[@]}" "$typescript" @types/node@20 >/dev/null
  "${npm[@]}" >/dev/null
  local tree
  if ! tree=$(npm ls --all 2>&1) || grep -qE 'invalid|UNMET DEPENDENCY|UNMET PEER|ERR!' <<<"$tree"; then
    echo "[pack-check] $4: npm ls reports a broken tree:" >&2; echo "$tree" >&2; exit 1
  fi
  cp "$root/scripts/pack-check/handoff.ts" "$root/scripts/pack-check/$1.ts" "$work/app/tsconfig.json" .
  npx tsc -p tsconfig.json
  # No process.exit in the program: it must end by itself once it has closed what it opened.
  local out status=0
  out=$(timeout 30 node "out/$1.js" "${REDIS_URL:-redis://127.0.0.1:6379}") || status=$?
  if [ "$status" = 124 ]; then echo "[pack-check] $4: did not exit within 30 s (a handle left open)" >&2; exit 1; fi
  if [ "$status" != 0 ] || [[ "$out" != "hand-off ok: "* ]]; then
    echo "[pack-check] $4: exit $status, printed: $out" >&2; exit 1
  fi
  local version
  version=$(node -p "require('./node_modules/${2%@*}/package.json').version")
  echo "[pack-check] $4 ${version}: installs and re-installs with plain npm, npm ls clean; ${out#hand-off ok: *, }" >&2
}
redis_user ioredis-user ioredis@5 redis 'ioredis user (no redis), ioredis'
redis_user node-redis-user redis@6 ioredis 'node-redis user (no ioredis), redis'
