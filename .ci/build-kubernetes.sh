#!/usr/bin/env bash
# Build Kubernetes v1.20.2's kube-apiserver, kube-scheduler, kube-controller-manager and kubemark
# (the hollow node: a real kubelet with a fake container runtime) from Debian bookworm's own source
# package (the full upstream tree with vendor/), with Debian's Go, as debian/rules does; nothing
# else is downloaded. One `make` for all four shares the compiled packages.
#   usage: build-kubernetes.sh WORKDIR  ->  WORKDIR/bin/{kube-apiserver,kube-scheduler,
#          kube-controller-manager,kubemark}  (about 20 min on 2 cores, once)
# Also installs Debian's etcd-server (/usr/bin/etcd). The vendored reflect2 1.0.1 crashes with
# Go >= 1.18, so it is replaced by Debian's 1.0.2 sources.
set -euo pipefail
W=${1:?usage: build-kubernetes.sh WORKDIR}
mkdir -p "$W/src" "$W/bin"
SRC=/etc/apt/sources.list.d/lowcostgpu-debsrc.sources
if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ && [ ! -f "$SRC" ]; then
    URI=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources | head -n1)
    printf 'Types: deb-src\nURIs: %s\nSuites: bookworm\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
        "$URI" > "$SRC"
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq golang-go etcd-server golang-github-modern-go-reflect2-dev rsync >/dev/null
cd "$W/src"
apt-get source --download-only kubernetes=1.20.5+really1.20.2-1.1+deb12u1 2>/dev/null
rm -rf kubernetes-1.20.2
tar xzf kubernetes_1.20.5+really1.20.2.orig.tar.gz
cd kubernetes-1.20.2
R=vendor/github.com/modern-go/reflect2
rm -rf "$R" && mkdir -p "$R"
cp /usr/share/gocode/src/github.com/modern-go/reflect2/*.go \
   /usr/share/gocode/src/github.com/modern-go/reflect2/*.s "$R/"
unset GOFLAGS
export KUBE_GIT_VERSION=v1.20.2 KUBE_GIT_MAJOR=1 KUBE_GIT_MINOR=20 KUBE_GIT_TREE_STATE=clean
export HOME="$W/home"
mkdir -p "$HOME"
BINARIES="kube-apiserver kube-scheduler kube-controller-manager kubemark"
make WHAT="$(for b in $BINARIES; do printf 'cmd/%s ' "$b"; done)"
for b in $BINARIES; do
    cp "_output/bin/$b" "$W/bin/$b.tmp"
    mv "$W/bin/$b.tmp" "$W/bin/$b"  # complete or absent, never half
done
"$W/bin/kube-apiserver" --version
