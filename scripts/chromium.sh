#!/usr/bin/env bash
# Installs Debian's Chromium for the demo's browser test (apps/demo/test/dashboard.test.ts), only if it is missing.
# The test drives /usr/bin/chromium with playwright-core; no browser is downloaded from anywhere else.
set -euo pipefail

if [ -x /usr/bin/chromium ]; then
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "[chromium] /usr/bin/chromium is missing and apt-get is not available: install Chromium by hand" >&2
  exit 1
fi

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

echo "[chromium] installing Debian's chromium" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null
/usr/bin/chromium --version >&2
