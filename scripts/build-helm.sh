#!/usr/bin/env bash
# Builds helm from its Go module (helm.sh/helm/v3 at HELM_VERSION), once,
# into .cache/helm/VERSION/helm: the chart's lint and template tests
# (test/e2e/chart, make test-chart) run it. Nothing of it is committed; the
# module proxy serves the source, and `go install pkg@version` builds with
# helm's own go.mod, so the binary is the one upstream's release builds.
#
# Prints the binary's path. Does nothing more when it exists. Static
# (CGO_ENABLED=0), -p 2: a cold build is a few minutes of CPU on 2 cores.
set -euo pipefail

VERSION=${HELM_VERSION:-v3.22.0}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${HELM_CACHE:-$root/.cache/helm}/$VERSION
out=$dir/helm
GO=${GO:-go}

if [ ! -x "$out" ]; then
	mkdir -p "$dir"
	# Two builds at once (two checkouts sharing .cache) would race on $out.
	exec 9>"$dir/.lock"
	flock 9
	if [ ! -x "$out" ]; then
		echo "build-helm: building helm.sh/helm/v3/cmd/helm $VERSION into $out" >&2
		start=$(date +%s)
		GOBIN="$dir/bin.tmp" CGO_ENABLED=0 GOFLAGS= $GO install -p 2 -trimpath \
			-ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$VERSION" \
			"helm.sh/helm/v3/cmd/helm@$VERSION" >&2
		mv "$dir/bin.tmp/helm" "$out"
		rmdir "$dir/bin.tmp"
		echo "build-helm: done in $(( $(date +%s) - start )) s: $("$out" version --short)" >&2
	fi
fi
echo "$out"
