#!/usr/bin/env bash
# Builds the test bed's CoreDNS (tools/coredns: CoreDNS with the kubernetes,
# bind, errors, log, health, ready and cache plugins, no forward), once, into
# .cache/coredns/coredns-VERSION-HASH: the cluster DNS of the multi-node bed
# (test/e2e/cluster, `make conformance-upstream`). tools/coredns is its own
# module, so the project's go.mod does not grow CoreDNS' dependencies; the
# module proxy serves them.
#
# Does nothing when the binary exists. Static (CGO_ENABLED=0), -p 1 by
# default: a cold build is a few minutes of CPU, seconds when GOCACHE is warm.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
src=$root/tools/coredns
VERSION=$(awk '$1 == "require" && $2 == "github.com/coredns/coredns" { print $3 }' "$src/go.mod")
[ -n "$VERSION" ] || { echo "build-coredns: no github.com/coredns/coredns in $src/go.mod" >&2; exit 1; }
dir=${COREDNS_CACHE:-$root/.cache/coredns}
# The name carries a hash of tools/coredns, so a change of its plugins is
# built again (mk/coredns.mk computes the same name).
out=$dir/coredns-$VERSION-$(cat "$src/main.go" "$src/go.mod" "$src/go.sum" | sha256sum | cut -c1-12)
GO=${GO:-go}
P=${COREDNS_BUILD_P:-1}

[ -x "$out" ] && exit 0
mkdir -p "$dir"
# Two builds at once (two checkouts sharing .cache) would race on $out.
exec 9>"$dir/.lock"
flock 9
[ -x "$out" ] && exit 0

echo "build-coredns: building tools/coredns (CoreDNS $VERSION) into $out"
start=$(date +%s)
(cd "$src" && CGO_ENABLED=0 GOFLAGS= $GO build -p "$P" -trimpath -ldflags "-s -w" -o "$out.tmp" .)
mv "$out.tmp" "$out"
echo "build-coredns: done in $(( $(date +%s) - start )) s: $("$out" -version | head -1)"
