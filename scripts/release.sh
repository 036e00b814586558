#!/usr/bin/env bash
# release.sh: everything of a release into $DIST (default dist/), from the
# package registries only (the Go module proxy, Debian's mirror), with no
# container engine and no registry. Run by `make release` as root.
#
#   ipvs-proxy-linux-{amd64,arm64}   static binaries (CGO_ENABLED=0)
#   oci/                             OCI image layout: one image index, tag
#                                    $VERSION, over the linux/amd64 and
#                                    linux/arm64 images (tools/ociimage)
#   ipvs-proxy-$VERSION-oci.tar      the same layout as one tar, for
#                                    `skopeo copy oci-archive:...` or
#                                    `ctr images import`
#   sbom.spdx.json                   Go modules and Debian packages (tools/sbom)
#   SHA256SUMS                       of every file above
#
# The image of each architecture: scripts/release-rootfs.sh's Debian root
# file system, then the binary as /usr/local/bin/ipvs-proxy and
# /usr/local/bin/kube-proxy. `tools/ociimage check` proves the index before
# the sums are written.
set -euo pipefail

VERSION=${VERSION:?VERSION (v + the VERSION file) is set by make release}
DIST=${DIST:-dist}
GO=${GO:-go}
ARCHS="amd64 arm64"
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1735689600}

say() { printf 'release: %s\n' "$*" >&2; }

rm -rf "$DIST"
mkdir -p "$DIST/work"
ldflags="-s -w -X github.com/ipvs-proxy/ipvs-proxy/internal/version.Version=$VERSION"
images=() sbom=()
for arch in $ARCHS; do
	bin=$DIST/ipvs-proxy-linux-$arch
	say "building $bin"
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch $GO build -trimpath -ldflags "$ldflags" -o "$bin" ./cmd/ipvs-proxy
	# Static: the init container installs it on hosts whose libc is unknown.
	$GO version -m "$bin" | grep -q 'CGO_ENABLED=0' || { say "$bin is not a CGO_ENABLED=0 build"; exit 1; }
	rootfs=$DIST/work/rootfs-$arch.tar
	bash scripts/release-rootfs.sh "$arch" "$rootfs"
	images+=(-platform "$arch=$rootfs,$bin")
	sbom+=(-arch "$arch=$bin,$rootfs.packages")
done
# The host's own binary prints the version it is released as and, under
# the image's name kube-proxy, starts `run` from kubeadm's command line
# (--init-only: up to the start, as in cmd/ipvs-proxy's tests).
host_bin=$(realpath "$DIST/ipvs-proxy-linux-$($GO env GOARCH)")
if [ -x "$host_bin" ]; then
	"$host_bin" version | grep -q "^ipvs-proxy $VERSION " || { say "$host_bin version: $("$host_bin" version)"; exit 1; }
	ln -s "$host_bin" "$DIST/work/kube-proxy"
	# kubeadm's configuration with its kubeconfig here: pre-flight reads
	# the kubeconfig, whose API server (loopback, closed) is not reached.
	cat >"$DIST/work/kubeconfig.conf" <<-EOF
		apiVersion: v1
		kind: Config
		clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
		contexts: [{name: c, context: {cluster: c, user: u}}]
		current-context: c
		users: [{name: u, user: {}}]
	EOF
	sed "s#/var/lib/kube-proxy/kubeconfig.conf#$(realpath "$DIST/work/kubeconfig.conf")#" \
		internal/config/testdata/kubeadm-v1.34-config.conf >"$DIST/work/config.conf"
	# Exit 2 is a refused flag or configuration; 1 with "the kernel has no
	# IPVS" is this build host's kernel, which pre-flight checks last.
	rc=0
	"$DIST/work/kube-proxy" --config="$DIST/work/config.conf" \
		--hostname-override=node-a --init-only 2>"$DIST/work/init-only.log" || rc=$?
	if [ "$rc" != 0 ] && ! { [ "$rc" = 1 ] && grep -q 'the kernel has no IPVS' "$DIST/work/init-only.log"; }; then
		cat "$DIST/work/init-only.log" >&2
		say "kube-proxy's command line was refused (exit $rc)"
		exit 1
	fi
fi

say "assembling the image index $DIST/oci:$VERSION"
$GO run ./tools/ociimage build -layout "$DIST/oci" -tag "$VERSION" "${images[@]}"
$GO run ./tools/ociimage check -layout "$DIST/oci" -tag "$VERSION" -archs "${ARCHS// /,}"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
	-C "$DIST/oci" -cf "$DIST/ipvs-proxy-$VERSION-oci.tar" .

say "writing the SBOM"
$GO run ./tools/sbom -version "$VERSION" -notice NOTICE -o "$DIST/sbom.spdx.json" \
	-created "$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)" "${sbom[@]}"

rm -rf "$DIST/work"
(cd "$DIST" && sha256sum ipvs-proxy-linux-* "ipvs-proxy-$VERSION-oci.tar" sbom.spdx.json >SHA256SUMS)
say "done: $DIST"
ls -l "$DIST" >&2
