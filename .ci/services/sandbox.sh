#!/usr/bin/env bash
# Debian's bubblewrap for the local runtime's sandbox (adapters/local/sandbox.py): `serve` refuses
# to start without it unless --no-sandbox, and tests/adapters/runtime/test_sandbox.py fails under
# CI=true when it cannot sandbox. Idempotent and quiet.
set -euo pipefail
if ! command -v bwrap >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq bubblewrap >/dev/null
fi
bwrap --version
