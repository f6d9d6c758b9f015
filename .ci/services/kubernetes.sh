#!/usr/bin/env bash
# Real Kubernetes components for tests/adapters/kubernetes and the runtime suite: kube-apiserver,
# kube-scheduler, kube-controller-manager and kubemark's hollow node (a real kubelet with a fake
# container runtime) are built once (.ci/build-kubernetes.sh, from Debian's source package) into
# the cache outside the repository, and etcd comes from Debian's etcd-server. The tests start them
# themselves on free loopback ports and stop them at the end. Idempotent: quick when all are there.
set -euo pipefail
CACHE="${LOWCOSTGPU_CACHE:-$HOME/.cache/lowcostgpu}/k8s"
missing=0
for b in kube-apiserver kube-scheduler kube-controller-manager kubemark; do
    [ -x "$CACHE/bin/$b" ] || missing=1
done
if [ "$missing" = 1 ]; then
    echo "building the Kubernetes components into $CACHE (once; about 20 minutes)"
    mkdir -p "$CACHE"
    bash "$(dirname "$0")/../build-kubernetes.sh" "$CACHE" > "$CACHE.build.log" 2>&1 \
        || { tail -40 "$CACHE.build.log"; exit 1; }
fi
if ! command -v etcd >/dev/null && [ ! -x /usr/bin/etcd ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq etcd-server >/dev/null
fi
"$CACHE/bin/kube-apiserver" --version
