#!/usr/bin/env bash
# test-kernel.sh: build every package of the main module that has
# *_kernel_test.go files with `go test -c -tags kernel`, then run all the
# binaries in ONE boot of the test VM (test/vmtest/cmd/vmrun), streaming
# their output. Exits non-zero when nothing was found to run, a build fails,
# the VM cannot boot, a binary fails, or a test skips.
#
# Env (all optional):
#   KERNEL_PKGS        packages to build instead of every one found, e.g. "./ipvs/ ./addrmgr/"
#   KERNEL_TEST_FLAGS  extra flags for every binary, e.g. "-test.run=TestBed -test.count=1"
#   VMRUN_FLAGS        extra vmrun flags, e.g. "-forward-port 6443 -env K=V"
#   KERNEL_TEST_DIR    where each run's directory of binaries goes (default
#                      .cache/kernel-tests); a run uses its own subdirectory,
#                      removed at exit, so runs in one tree never clobber
#                      each other's binaries
#   GO                 the go command (default go)
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
BASE=${KERNEL_TEST_DIR:-.cache/kernel-tests}
log() { echo "test-kernel: $*" >&2; }

if [ -n "${KERNEL_PKGS:-}" ]; then
	read -r -a pkgs <<<"$KERNEL_PKGS"
else
	# Every package of the main module (nested modules such as test/e2e are
	# not part of ./...) with at least one *_kernel_test.go file.
	# A package go list cannot load fails the run here, never drops out.
	files=$($GO list -tags kernel \
		-f '{{$d := .ImportPath}}{{range .TestGoFiles}}{{$d}} {{.}}{{"\n"}}{{end}}{{range .XTestGoFiles}}{{$d}} {{.}}{{"\n"}}{{end}}' ./...)
	mapfile -t pkgs < <(awk '$2 ~ /_kernel_test\.go$/ {print $1}' <<<"$files" | sort -u)
fi
if ((${#pkgs[@]} == 0)); then
	log "no package has *_kernel_test.go files: nothing would run"
	exit 1
fi

mkdir -p "$BASE"
OUT=$(mktemp -d "$BASE/run.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
mod=$($GO list -m)
args=()
start=$(date +%s)
for p in "${pkgs[@]}"; do
	ip=$($GO list -tags kernel "$p")
	rel=${ip#"$mod"}
	rel=${rel#/}
	name=${rel//\//_}
	bin="$OUT/${name:-root}.test"
	# -vet=off: `make lint` vets -tags kernel; vet here would compute
	# analysis facts for every dependency, minutes on a cold cache.
	log "go test -c -vet=off -tags kernel -o $bin $ip"
	$GO test -c -vet=off -tags kernel -o "$bin" "$ip"
	if [ ! -x "$bin" ]; then
		log "$ip built no test binary (no tests with -tags kernel?)"
		exit 1
	fi
	((${#args[@]})) && args+=(:::)
	# shellcheck disable=SC2086 # KERNEL_TEST_FLAGS is a list of flags
	args+=("$bin" -test.v -test.count=1 -test.timeout=20m ${KERNEL_TEST_FLAGS:-})
done
built=$(date +%s)
log "built ${#pkgs[@]} binaries in $((built - start))s; booting the VM once for all of them"
# shellcheck disable=SC2086 # VMRUN_FLAGS is a list of flags
$GO run ./test/vmtest/cmd/vmrun -fail-on-skip -timeout 45m ${VMRUN_FLAGS:-} -- "${args[@]}"
log "VM run took $(($(date +%s) - built))s; total $(($(date +%s) - start))s"
