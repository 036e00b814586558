#!/usr/bin/env bash
# install-prometheus.sh: Debian's prometheus package (prometheus and
# promtool in /usr/bin) for `make test-prometheus`, as install-deps.sh
# installs its packages: idempotent, `apt-get update` only when something is
# missing, recommended packages (node exporter) left out. The test runs
# prometheus inside the test VM, which sees the host's /usr/bin over 9p; no
# service is started on the host (a container's policy-rc.d refuses it, and
# the package's unit is never started here).
set -euo pipefail

PKGS=(prometheus)

log() { echo "install-prometheus: $*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
for p in "${PKGS[@]}"; do
	dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
done
if ((${#missing[@]})); then
	log "installing ${missing[*]} (apt output in ${APT_LOG:=.cache/apt-prometheus.log})"
	mkdir -p "$(dirname "$APT_LOG")"
	as_root apt-get update -qq >"$APT_LOG" 2>&1
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$APT_LOG" 2>&1 ||
		{ log "apt-get install failed; see $APT_LOG"; tail -n 20 "$APT_LOG" >&2; exit 1; }
fi
