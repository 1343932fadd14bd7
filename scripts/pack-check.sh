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
npm install --no-audit --no-fund --loglevel=error "$work"/tarballs/*.tgz pg@8 kysely@0.28 redis@5 etcd3@1 node-zookeeper-client@1 "typescript@$(node -p "require('$root/node_modules/typescript/package.json').version")" @types/node@20 @types/pg@8 >/dev/null

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
