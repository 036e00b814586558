#!/usr/bin/env bash
# build-image.sh: the DaemonSet's OCI image, built without a container engine
# or registry (issue 15 item 9). Run from the repository root by `make image`.
#
#   layer 1  a Debian root file system from the package mirrors (mmdebstrap,
#            variant essential, plus iptables, ipset, kmod, ca-certificates),
#            with deploy/image/iptables-wrapper installed as the iptables and
#            ip6tables alternatives, as the Dockerfile does;
#   layer 2  the static bin/ipvs-proxy at /usr/local/bin/ipvs-proxy.
#
# Assembled with umoci into the OCI layout $IMAGE_DIR/oci, tag $IMAGE_TAG
# (copy it anywhere with `skopeo copy oci:.cache/image/oci:TAG docker://...`).
# Layer 1 is cached as a tarball named after what goes into it (suite,
# packages, the wrapper, this recipe), so a second build only adds layer 2.
# Needs root (mmdebstrap's root mode, umoci keeping file owners).
set -euo pipefail

IMAGE_DIR=${IMAGE_DIR:-.cache/image}
IMAGE_TAG=${IMAGE_TAG:-dev}
BIN=${BIN:-bin/ipvs-proxy}
SUITE=bookworm
MIRROR=${IMAGE_MIRROR:-http://deb.debian.org/debian}
PACKAGES=iptables,ipset,kmod,ca-certificates
WRAPPER=deploy/image/iptables-wrapper
# Fixed file times: the same inputs give the same layer digests.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1735689600}

say() { printf 'image: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (mmdebstrap root mode; umoci keeps file owners)"
[ -x "$BIN" ] || die "$BIN missing: run make build first"
if ldd "$BIN" >/dev/null 2>&1; then
	die "$BIN is dynamically linked; the init container installs it on hosts whose libc is unknown"
fi
for tool in mmdebstrap umoci; do
	if ! command -v "$tool" >/dev/null; then
		say "installing $tool (apt)"
		apt-get install -y -qq --no-install-recommends "$tool" >/dev/null ||
			{ apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends "$tool" >/dev/null; }
	fi
done

mkdir -p "$IMAGE_DIR"
# The recipe of layer 1: change RECIPE when the hooks below change.
RECIPE=2
key=$( { echo "$RECIPE $SUITE $MIRROR $PACKAGES"; cat "$WRAPPER"; } | sha256sum | cut -c1-16)
base="$IMAGE_DIR/rootfs-$SUITE-$key.tar"

if [ ! -s "$base" ]; then
	say "building the Debian $SUITE root file system ($PACKAGES) with mmdebstrap; about a minute, once"
	start=$SECONDS
	tmp="$IMAGE_DIR/tmp-$key"
	rm -rf "$tmp" "$tmp.tar"
	# The wrapper stands in for iptables, ip6tables and their -save/-restore
	# until its first call picks the node's backend (deploy/image).
	mmdebstrap --quiet --mode=root --variant=essential --include="$PACKAGES" \
		--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
		--customize-hook="copy-in $WRAPPER /usr/sbin" \
		--customize-hook='chroot "$1" sh -ec "
			chmod 0755 /usr/sbin/iptables-wrapper
			for fam in iptables ip6tables; do
				update-alternatives --quiet --install /usr/sbin/\$fam \$fam /usr/sbin/iptables-wrapper 100 \
					--slave /usr/sbin/\$fam-restore \$fam-restore /usr/sbin/iptables-wrapper \
					--slave /usr/sbin/\$fam-save \$fam-save /usr/sbin/iptables-wrapper
				update-alternatives --quiet --set \$fam /usr/sbin/iptables-wrapper
			done
			iptables-legacy --version; iptables-nft --version; modprobe --version; ipset --version"' \
		--customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/var/log/* "$1"/usr/share/doc/*' \
		"$SUITE" "$tmp" "$MIRROR" >&2
	# A directory, then one tar with sorted names and clamped times: the same
	# packages give the same layer.
	tar --sort=name --numeric-owner --clamp-mtime --mtime="@$SOURCE_DATE_EPOCH" \
		-C "$tmp" -cf "$tmp.tar" $(ls -A "$tmp")
	rm -rf "$tmp"
	mv "$tmp.tar" "$base"
	say "root file system: $base ($(du -h "$base" | cut -f1), $((SECONDS - start)) s)"
fi

# Layer 2: the binary, owned by root, at a fixed time.
work=$(mktemp -d "$IMAGE_DIR/work.XXXXXX")
trap 'rm -rf "$work"' EXIT
install -D -m 0755 "$BIN" "$work/layer/usr/local/bin/ipvs-proxy"
# kube-proxy's name: `ipvs-proxy run` with kube-proxy's command line.
ln -s ipvs-proxy "$work/layer/usr/local/bin/kube-proxy"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
	-C "$work/layer" -cf "$work/bin.tar" usr

# A fresh layout each time: the base layer blob is added again (umoci
# compresses it; a few seconds), nothing stale survives.
oci="$IMAGE_DIR/oci"
rm -rf "$oci"
umoci init --layout "$oci"
umoci new --image "$oci:$IMAGE_TAG"
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
umoci raw add-layer --image "$oci:$IMAGE_TAG" --history.created "$created" \
	--history.created_by "mmdebstrap $SUITE --variant=essential --include=$PACKAGES + $WRAPPER" "$base"
umoci raw add-layer --image "$oci:$IMAGE_TAG" --history.created "$created" \
	--history.created_by "$BIN" "$work/bin.tar"
umoci config --image "$oci:$IMAGE_TAG" --no-history --created "$created" --os linux --architecture amd64 \
	--config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	--config.entrypoint /usr/local/bin/ipvs-proxy --config.cmd run \
	--config.label "org.opencontainers.image.version=$IMAGE_TAG" \
	--config.label org.opencontainers.image.source=https://github.com/ipvs-proxy/ipvs-proxy
umoci gc --layout "$oci"
say "OCI layout $oci, tag $IMAGE_TAG ($(du -sh "$oci" | cut -f1) compressed)"
