#!/usr/bin/env bash
# Builds one program of k8s.io/kubernetes (cmd/NAME: kube-proxy, kubelet,
# kubectl; test/images/agnhost) at K8S_VERSION (default v1.34.4, the version
# the bed tests against), once, into .cache/NAME/NAME-VERSION. kube-proxy is
# the reference proxy of the takeover and rollback tests; kubelet runs the
# shipped DaemonSet in make test-node, agnhost its backend pod; kubectl (with
# its embedded kustomize) runs the migration guide's commands in make
# test-migration-doc.
# Nothing of it is committed; the module proxy serves the source.
#
# It builds in a throwaway module (scripts/lib/upstream-module.sh says why),
# so the binary is the one upstream ships.
#
# Usage: build-k8s.sh NAME. Does nothing when the binary exists. Static
# (CGO_ENABLED=0, as upstream builds both), -p 2: a cold build is ~10 min of
# CPU on 2 cores, a few seconds when GOCACHE is warm.
set -euo pipefail

name=${1:?usage: build-k8s.sh NAME (kube-proxy, kubelet, kubectl, agnhost)}
case $name in
kube-proxy | kubelet | kubectl) pkg=k8s.io/kubernetes/cmd/$name ;;
agnhost) pkg=k8s.io/kubernetes/test/images/agnhost ;;
*) echo "build-k8s: unknown program $name (kube-proxy, kubelet, kubectl, agnhost)" >&2; exit 2 ;;
esac
VERSION=${K8S_VERSION:-${KUBE_PROXY_VERSION:-v1.34.4}}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$root/.cache/$name
[ "$name" = kube-proxy ] && dir=${KUBE_PROXY_CACHE:-$dir}
out=$dir/$name-$VERSION
GO=${GO:-go}

[ -x "$out" ] && exit 0
mkdir -p "$dir"
# Two builds at once (two checkouts sharing .cache) would race on $out.
exec 9>"$dir/.lock"
flock 9
[ -x "$out" ] && exit 0

mod=$dir/mod-$VERSION
. "$root/scripts/lib/upstream-module.sh"
upstream_module "$mod" "$VERSION" "$name-build"

echo "build-k8s: building $pkg $VERSION into $out"
start=$(date +%s)
(cd "$mod" && CGO_ENABLED=0 GOFLAGS=-mod=mod nice -n 10 $GO build -p 2 -trimpath \
	-ldflags "$(upstream_ldflags "$VERSION")" \
	-o "$out.tmp" "$pkg")
mv "$out.tmp" "$out"
case $name in
kubectl) v=$("$out" version --client | head -1) ;;
*) v=$("$out" --version 2>&1 | head -1) ;;
esac
echo "build-k8s: done in $(( $(date +%s) - start )) s: $v"
