package vmtest

// The guest boots in two stages, both run by the static busybox copied from
// the host:
//
//  1. /init in the initramfs loads the virtio, 9p and overlay modules, mounts
//     the host's root read-only over 9p (tag "hostroot"), puts a tmpfs overlay
//     on top and switch_roots into it.
//  2. /vmtest/stage2 in the new root binds the unpacked kernel's module tree
//     onto /lib/modules/VERSION, loads IPVS and friends (failing loudly when
//     they are missing), optionally configures the forwarded-port NIC, then
//     sources /vmtest/job, which runs the test binaries and prints one marker
//     line per binary. It powers the VM off at the end.
//
// Markers are lines "@@vmtest NONCE WORD ..." on the serial console; NONCE is
// random per run so a test's own output can never fake one.

const initScript = `#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
. /vmtest/env
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
fail() {
	echo "vmtest: boot: $*"
	echo "@@vmtest $NONCE fail boot $*"
	poweroff -f
	sleep 10
}
for m in $(cat /vmtest/modules); do
	insmod "/vmtest/$m" || fail "insmod $m"
done
mkdir -p /lower /rw /newroot
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000 hostroot /lower || fail "mount 9p hostroot"
mount -t tmpfs -o mode=0755 tmpfs /rw || fail "mount tmpfs"
mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /newroot || fail "mount overlay"
mkdir -p /newroot/vmtest
cp /vmtest/env /vmtest/stage2 /vmtest/job /newroot/vmtest/ || fail "copy stage2"
cp /bin/busybox /newroot/vmtest/busybox || fail "copy busybox"
mount --move /proc /newroot/proc
mount --move /sys /newroot/sys
mount --move /dev /newroot/dev
exec switch_root /newroot /vmtest/busybox sh /vmtest/stage2
`

const stage2Script = `. /vmtest/env
B=/vmtest/busybox
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root
mark() { echo "@@vmtest $NONCE $*"; }
off() { $B sync; $B poweroff -f; $B sleep 10; }
fail() { echo "vmtest: $2"; mark fail "$@"; off; }
$B mkdir -p "/lib/modules/$KVER" /run /dev/pts /dev/shm
$B mount --bind "$MODDIR" "/lib/modules/$KVER" || fail boot "bind $MODDIR"
$B mount -t tmpfs -o mode=0755 tmpfs /run
$B mkdir -p /run/netns /run/lock
$B mount -t devpts devpts /dev/pts
$B mount -t tmpfs tmpfs /dev/shm
$B mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
$B hostname vmtest
$B ip link set lo up
echo "vmtest: stage2 at $($B cut -d" " -f1 /proc/uptime)s"
# No dummy0 in the root namespace: tests create their own devices.
echo "options dummy numdummies=0" >/etc/modprobe.d/vmtest.conf
modprobe -a $GUEST_MODULES || fail ipvs "modprobe -a $GUEST_MODULES failed: the guest kernel lacks IPVS or its companions"
[ -e /proc/net/ip_vs ] || fail ipvs "/proc/net/ip_vs missing after modprobe ip_vs"
if [ -n "$FORWARD_PORT" ]; then
	modprobe virtio_net || fail boot "modprobe virtio_net"
	dev=$($B ls /sys/class/net | $B grep -v '^lo$' | $B head -n1)
	[ -n "$dev" ] || fail boot "no network device for the forwarded port"
	$B ip link set "$dev" up && $B ip addr add 10.0.2.15/24 dev "$dev" || fail boot "configure $dev"
fi
echo "vmtest: modules loaded at $($B cut -d" " -f1 /proc/uptime)s"
mark ready
. /vmtest/job
mark done
off
`
