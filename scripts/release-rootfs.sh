#!/usr/bin/env bash
# release-rootfs.sh ARCH OUT: the image's Debian root file system for one
# architecture (amd64, arm64) as one tar OUT, plus OUT.packages ("name
# version architecture" per line, for the SBOM). Run by scripts/release.sh.
#
# Nothing of the target architecture is executed, and the host's dpkg is
# not touched: apt, with a private configuration and state under
# .cache/release/apt-ARCH (APT::Architecture=ARCH, an empty dpkg status),
# resolves and downloads the packages from the mirror the host already uses;
# each is unpacked with dpkg-deb into the tree, on merged /usr. What their
# maintainer scripts would do that the image needs is done by host tools on
# the tree: the iptables alternatives (update-alternatives --root, as
# iptables' postinst registers them, then deploy/image/iptables-wrapper over
# them, as the Dockerfile does), /bin/sh, /etc/passwd and /etc/group.
#
# The tar is cached, named after its inputs (suite, packages, the wrapper,
# this recipe); the packages are the mirror's newest at the first build.
set -euo pipefail

arch=${1:?usage: release-rootfs.sh ARCH OUT}
out=${2:?usage: release-rootfs.sh ARCH OUT}
SUITE=bookworm
MIRROR=${IMAGE_MIRROR:-http://deb.debian.org/debian}
SECURITY=${IMAGE_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
# iptables (nft and legacy), kmod (modprobe with the host's /lib/modules),
# dash and bash (the init containers), coreutils (install, mv, seq, sleep),
# grep and dpkg's update-alternatives (the iptables wrapper). No ipset.
# IMAGE_PACKAGES replaces the list: make test-node's kube-proxy image adds
# ipset, which kube-proxy's IPVS mode runs (mk/node.mk).
PACKAGES=${IMAGE_PACKAGES:-base-files base-passwd bash coreutils dash dpkg grep iptables kmod}
WRAPPER=deploy/image/iptables-wrapper
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1735689600}

say() { printf 'rootfs %s: %s\n' "$arch" "$*" >&2; }
die() { say "$*"; exit 1; }

case $arch in amd64 | arm64) ;; *) die "architecture $arch: want amd64 or arm64" ;; esac
[ "$(id -u)" = 0 ] || die "must run as root (the tree keeps root-owned files and device-free /dev)"

cache=${RELEASE_CACHE:-.cache/release}
RECIPE=1
key=$( { echo "$RECIPE $SUITE $MIRROR $SECURITY $PACKAGES"; cat "$WRAPPER"; } | sha256sum | cut -c1-16)
cached=$cache/rootfs-$SUITE-$arch-$key.tar
mkdir -p "$cache" "$(dirname "$out")"
exec 9>"$cache/.lock-$arch"
flock 9

if [ ! -s "$cached" ]; then
	state=$(realpath "$cache")/apt-$arch
	rm -rf "$state"
	mkdir -p "$state"/etc/apt/{apt.conf.d,preferences.d,sources.list.d} "$state"/var/lib/apt/lists/partial \
		"$state"/var/cache/apt/archives/partial "$state"/var/lib/dpkg
	: >"$state/var/lib/dpkg/status"
	keyring=/usr/share/keyrings/debian-archive-keyring.gpg
	cat >"$state/etc/apt/sources.list" <<-SOURCES
	deb [arch=$arch signed-by=$keyring] $MIRROR $SUITE main
	deb [arch=$arch signed-by=$keyring] $MIRROR $SUITE-updates main
	deb [arch=$arch signed-by=$keyring] $SECURITY $SUITE-security main
	SOURCES
	apt=(apt-get -q -o "Dir=$state" -o "Dir::State::status=$state/var/lib/dpkg/status"
		-o "APT::Architecture=$arch" -o "APT::Architectures=$arch"
		-o "Dir::Etc::TrustedParts=/etc/apt/trusted.gpg.d" -o Debug::NoLocking=1
		-o APT::Install-Recommends=false -o APT::Sandbox::User=root)
	say "resolving $PACKAGES from $MIRROR ($SUITE)"
	"${apt[@]}" update >&2
	"${apt[@]}" install -y --download-only $PACKAGES >&2

	tree=$state/tree
	mkdir -p "$tree"/usr/{bin,sbin,lib}
	# Merged /usr, as bookworm's debootstrap makes it.
	for d in bin sbin lib; do ln -s "usr/$d" "$tree/$d"; done
	[ "$arch" = amd64 ] && { mkdir -p "$tree/usr/lib64"; ln -s usr/lib64 "$tree/lib64"; }
	: >"$out.packages.tmp"
	for deb in "$state"/var/cache/apt/archives/*.deb; do
		dpkg-deb --fsys-tarfile "$deb" | tar -x --keep-directory-symlink -C "$tree" \
			--exclude='./usr/share/doc/*' --exclude='./usr/share/man/*' \
			--exclude='./usr/share/locale/*' --exclude='./usr/share/info/*'
		dpkg-deb -f "$deb" Package Version Architecture | awk -F': ' '{printf "%s%s", (NR>1 ? " " : ""), $2} END {print ""}' >>"$out.packages.tmp"
	done
	sort -o "$out.packages.tmp" "$out.packages.tmp"

	# What the maintainer scripts would do, by host tools on the tree.
	[ -e "$tree/usr/bin/sh" ] || ln -s dash "$tree/usr/bin/sh"
	cp "$tree/usr/share/base-passwd/passwd.master" "$tree/etc/passwd"
	cp "$tree/usr/share/base-passwd/group.master" "$tree/etc/group"
	mkdir -p "$tree/etc/alternatives" "$tree/var/lib/dpkg/alternatives" "$tree/tmp" "$tree/run" "$tree/proc" "$tree/sys" "$tree/dev"
	chmod 1777 "$tree/tmp"
	install -m 0755 "$WRAPPER" "$tree/usr/sbin/iptables-wrapper"
	ua=(update-alternatives --root "$tree" --quiet)
	for fam in iptables ip6tables; do
		for backend in legacy:10 nft:20 wrapper:100; do
			b=${backend%:*} prio=${backend#*:}
			if [ "$b" = wrapper ]; then
				target=/usr/sbin/iptables-wrapper; restore=$target; save=$target
			else
				target=/usr/sbin/$fam-$b; restore=/usr/sbin/$fam-$b-restore; save=/usr/sbin/$fam-$b-save
			fi
			"${ua[@]}" --install "/usr/sbin/$fam" "$fam" "$target" "$prio" \
				--slave "/usr/sbin/$fam-restore" "$fam-restore" "$restore" \
				--slave "/usr/sbin/$fam-save" "$fam-save" "$save"
		done
		"${ua[@]}" --set "$fam" /usr/sbin/iptables-wrapper
	done
	rm -rf "$tree/var/log/"* "$tree/var/cache/"*

	# One tar with sorted names, numeric owners and clamped times: the same
	# packages give the same layer.
	tar --sort=name --numeric-owner --clamp-mtime --mtime="@$SOURCE_DATE_EPOCH" \
		-C "$tree" -cf "$cached.tmp" $(ls -A "$tree")
	mv "$out.packages.tmp" "$cached.packages"
	mv "$cached.tmp" "$cached"
	rm -rf "$state"
	say "$cached ($(du -h "$cached" | cut -f1), $(wc -l <"$cached.packages") packages)"
fi
cp "$cached" "$out"
cp "$cached.packages" "$out.packages"
