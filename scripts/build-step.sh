#!/usr/bin/env bash
# build-step.sh TARGET WHAT COLD -- COMMAND...: runs one build step of
# `make demo` (or any target) the way a newcomer wants to see it: one line
# saying what is built and how long it takes cold, a line every 30 s while
# it runs, one line with the time it took. The step's own output (`go:
# downloading ...`, compiler lines) goes to .cache/logs/$(basename
# TARGET).log, whose path is printed; on failure its last 30 lines are shown.
#
#   bash scripts/build-step.sh bin/demo "the demo's host program" "~4 min the first time" -- go build ./demo
set -uo pipefail
target=$1 what=$2 cold=$3
shift 3
[ "${1:-}" = "--" ] && shift
dir=${BUILD_LOG_DIR:-.cache/logs}
mkdir -p "$dir"
log=$dir/$(basename "$target").log

start=$SECONDS
echo "build: $target, $what${cold:+ ($cold)}; output in $log" >&2
"$@" >"$log" 2>&1 &
pid=$!
(
	while sleep 30; do
		echo "build: still building $target ($((SECONDS - start)) s so far; tail -f $log)" >&2
	done
) &
ticker=$!
wait "$pid"
rc=$?
kill "$ticker" 2>/dev/null
wait "$ticker" 2>/dev/null
if [ "$rc" -ne 0 ]; then
	echo "build: $target FAILED after $((SECONDS - start)) s (exit $rc); the last lines of $log:" >&2
	tail -n 30 "$log" >&2
	exit "$rc"
fi
echo "build: $target done in $((SECONDS - start)) s" >&2
