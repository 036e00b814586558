#!/usr/bin/env bash
# install-deps.sh: everything `make test` needs on a Debian (bookworm) machine,
# idempotent: it does nothing when all is present.
#
#  1. apt packages for the VM runner, the tools kernel tests exec in the
#     guest (ipvsadm, ipset, iptables, ip, conntrack), and gcc for
#     `go test -race`. `apt-get update` runs only when something is missing.
#  2. Debian's kernel package (linux-image-amd64's current flavour: IPVS,
#     dummy, veth, netfilter as modules), downloaded with `apt-get download`
#     and unpacked into .cache/vm/root (never installed on the host), with
#     modules.dep generated and the image decompressed to boot/vmlinux-VER
#     (TCG needs ~15 s to decompress the xz bzImage; the ELF boots via PVH).
#
# Env: VM_CACHE (default .cache/vm in the repo).
set -euo pipefail
cd "$(dirname "$0")/.."

# curl and netcat-openbsd: the upstream e2e tests exec `curl` and `nc -u`/`nc -v -t` in pods
# (make conformance-upstream; the VM shares the host's root filesystem).
PKGS=(qemu-system-x86 seabios ipxe-qemu busybox-static ipvsadm ipset iptables iproute2 gcc libc6-dev
      conntrack kmod cpio xz-utils curl netcat-openbsd nftables)
CACHE=${VM_CACHE:-.cache/vm}
ROOT=$CACHE/root

log() { echo "install-deps: $*" >&2; }
# apt's own output goes here, not to the terminal; its path is printed.
LOG=${INSTALL_LOG:-$PWD/.cache/logs/install-deps.log}
mkdir -p "$(dirname "$LOG")"
start=$SECONDS
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
for p in "${PKGS[@]}"; do
	dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
done
updated=
if ((${#missing[@]})); then
	log "installing ${missing[*]} with apt (a minute or two; output in $LOG)"
	as_root apt-get update -qq >>"$LOG" 2>&1
	updated=1
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$LOG" 2>&1 ||
		{ log "apt-get install failed; the last lines of $LOG:"; tail -n 20 "$LOG" >&2; exit 1; }
	log "packages installed in $((SECONDS - start)) s"
fi

if [ -e "$ROOT/.complete" ]; then
	exit 0
fi

# The flavour package linux-image-amd64 depends on exactly one versioned image.
image_pkg() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}'; }
pkg=$(image_pkg || true)
if [ -z "$pkg" ] && [ -z "$updated" ]; then
	as_root apt-get update -qq >>"$LOG" 2>&1
	pkg=$(image_pkg || true)
fi
[ -n "$pkg" ] || { log "cannot resolve linux-image-amd64 to a kernel package"; exit 1; }

log "fetching the test VM's kernel, $pkg (a ~70 MB download, unpacked into $CACHE, never installed on this machine; under a minute)"
kstart=$SECONDS
rm -rf "$ROOT" "$ROOT.tmp" "$CACHE/dl"
mkdir -p "$CACHE/dl"
(cd "$CACHE/dl" && apt-get download "$pkg" >>"$LOG" 2>&1 || true)
deb=$(ls "$CACHE"/dl/"$pkg"_*.deb 2>/dev/null | head -n1)
[ -n "$deb" ] || { log "apt-get download $pkg produced no .deb; the last lines of $LOG:"; tail -n 20 "$LOG" >&2; exit 1; }
mkdir -p "$ROOT.tmp"
dpkg-deb -x "$deb" "$ROOT.tmp"
ver=$(ls "$ROOT.tmp/lib/modules")
depmod -b "$ROOT.tmp" "$ver"
img="$ROOT.tmp/boot/vmlinuz-$ver"
off=$(grep -abo $'\xfd7zXZ\x00' "$img" | head -n1 | cut -d: -f1 || true)
if [ -n "$off" ] && tail -c+"$((off + 1))" "$img" | xz -dcq >"$ROOT.tmp/boot/vmlinux-$ver" 2>/dev/null ||
	[ -s "$ROOT.tmp/boot/vmlinux-$ver" ] && head -c4 "$ROOT.tmp/boot/vmlinux-$ver" | grep -q ELF; then
	log "decompressed boot/vmlinux-$ver"
else
	log "could not decompress $img; the runner will boot the bzImage (slower)"
	rm -f "$ROOT.tmp/boot/vmlinux-$ver"
fi
rm -rf "$CACHE/dl"
touch "$ROOT.tmp/.complete"
mv "$ROOT.tmp" "$ROOT"
log "kernel $ver ready in $ROOT ($((SECONDS - kstart)) s)"
