#!/usr/bin/env bash
# A real kube-apiserver for tests/adapters/kubernetes and the runtime suite: the binary is built
# once (.ci/build-kube-apiserver.sh, from Debian's source package) into the cache outside the
# repository, and etcd comes from Debian's etcd-server. The tests start both themselves on free
# loopback ports and stop them at the end. Idempotent: quick when both are there.
set -euo pipefail
CACHE="${LOWCOSTGPU_CACHE:-$HOME/.cache/lowcostgpu}/k8s"
if [ ! -x "$CACHE/bin/kube-apiserver" ]; then
    echo "building kube-apiserver into $CACHE (once; 7-10 minutes)"
    mkdir -p "$CACHE"
    bash "$(dirname "$0")/../build-kube-apiserver.sh" "$CACHE" > "$CACHE.build.log" 2>&1 \
        || { tail -40 "$CACHE.build.log"; exit 1; }
fi
if ! command -v etcd >/dev/null && [ ! -x /usr/bin/etcd ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq etcd-server >/dev/null
fi
"$CACHE/bin/kube-apiserver" --version
