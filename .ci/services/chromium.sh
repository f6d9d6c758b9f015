#!/usr/bin/env bash
# Debian's Chromium for the console's browser tests (tests/console, Playwright drives it at
# /usr/bin/chromium; no browser is downloaded). Idempotent and quiet.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq chromium >/dev/null
/usr/bin/chromium --version
