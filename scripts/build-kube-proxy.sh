#!/usr/bin/env bash
# Builds kube-proxy from k8s.io/kubernetes at KUBE_PROXY_VERSION (default
# v1.34.4), once, into .cache/kube-proxy/kube-proxy-VERSION: the reference
# proxy the takeover and rollback tests run in the test VM (test/e2e/takeover).
# Nothing of it is committed; the module proxy serves the source.
#
# It builds in a throwaway module (scripts/lib/upstream-module.sh says why),
# so the binary is the one upstream ships.
#
# Does nothing when the binary exists. Static (CGO_ENABLED=0), -p 2: a cold
# build is ~10 min of CPU on 2 cores, a few seconds when GOCACHE is warm.
set -euo pipefail

VERSION=${KUBE_PROXY_VERSION:-v1.34.4}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${KUBE_PROXY_CACHE:-$root/.cache/kube-proxy}
out=$dir/kube-proxy-$VERSION
GO=${GO:-go}

[ -x "$out" ] && exit 0
mkdir -p "$dir"
# Two builds at once (two checkouts sharing .cache) would race on $out.
exec 9>"$dir/.lock"
flock 9
[ -x "$out" ] && exit 0

mod=$dir/mod-$VERSION
. "$root/scripts/lib/upstream-module.sh"
upstream_module "$mod" "$VERSION" kube-proxy-build

echo "build-kube-proxy: building k8s.io/kubernetes/cmd/kube-proxy $VERSION into $out"
start=$(date +%s)
(cd "$mod" && CGO_ENABLED=0 GOFLAGS=-mod=mod $GO build -p 2 -trimpath \
	-ldflags "$(upstream_ldflags "$VERSION")" \
	-o "$out.tmp" k8s.io/kubernetes/cmd/kube-proxy)
mv "$out.tmp" "$out"
echo "build-kube-proxy: done in $(( $(date +%s) - start )) s: $("$out" --version)"
