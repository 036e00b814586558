#!/usr/bin/env bash
# Builds upstream's conformance programs from k8s.io/kubernetes at
# UPSTREAM_E2E_VERSION (default v1.34.4), once, into
# .cache/upstream-e2e/VERSION/: the e2e.test binary of test/e2e, kubectl
# (which e2e.test runs for `kubectl exec`) and agnhost (the server most
# [sig-network] tests run in their pods), and specs.txt, the names of the
# binary's [sig-network] specs, one per line, from a dry run (nothing is
# contacted). The names are what docs/conformance.md's rows are checked
# against (make conformance-names).
#
# It builds in a throwaway module (scripts/lib/upstream-module.sh says why).
# Does nothing when everything exists. Static (CGO_ENABLED=0), -p 2: a cold
# build is about 15 min of CPU on 2 cores (e2e.test alone 11), a minute
# when GOCACHE is warm.
set -euo pipefail

VERSION=${UPSTREAM_E2E_VERSION:-v1.34.4}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${UPSTREAM_E2E_CACHE:-$root/.cache/upstream-e2e}/$VERSION
GO=${GO:-go}

built() { [ -x "$dir/e2e.test" ] && [ -x "$dir/kubectl" ] && [ -x "$dir/agnhost" ] && [ -s "$dir/specs.txt" ]; }
built && exit 0
mkdir -p "$dir"
exec 9>"$dir/.lock"
flock 9
built && exit 0

. "$root/scripts/lib/upstream-module.sh"
upstream_module "$dir/mod" "$VERSION" upstream-e2e-build

# build OUT PKG [test]: go build (or go test -c) of PKG into $dir/OUT.
build() {
	local out=$1 pkg=$2 verb=(build)
	[ "${3:-}" = test ] && verb=(test -c)
	[ -x "$dir/$out" ] && return 0
	echo "build-upstream-e2e: $out from $pkg $VERSION"
	local start
	start=$(date +%s)
	(cd "$dir/mod" && CGO_ENABLED=0 GOFLAGS=-mod=mod $GO "${verb[@]}" -p 2 -trimpath \
		-ldflags "$(upstream_ldflags "$VERSION")" -o "$dir/$out.tmp" "$pkg")
	mv "$dir/$out.tmp" "$dir/$out"
	echo "build-upstream-e2e: $out in $(( $(date +%s) - start )) s"
}

build agnhost k8s.io/kubernetes/test/images/agnhost
build kubectl k8s.io/kubernetes/cmd/kubectl
build e2e.test k8s.io/kubernetes/test/e2e test

# The dry run walks the spec tree only: no cluster, no kubeconfig needed.
"$dir/e2e.test" --ginkgo.dry-run --ginkgo.no-color --ginkgo.v --ginkgo.focus='\[sig-network\]' 2>&1 |
	grep '^\[sig-network\] ' | sort -u >"$dir/specs.txt.tmp"
[ -s "$dir/specs.txt.tmp" ] || { echo "build-upstream-e2e: the dry run listed no [sig-network] spec" >&2; exit 1; }
mv "$dir/specs.txt.tmp" "$dir/specs.txt"
echo "build-upstream-e2e: $(wc -l <"$dir/specs.txt") [sig-network] specs in $dir/specs.txt"
