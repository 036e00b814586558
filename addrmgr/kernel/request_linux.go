package kernel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/internal/edge/nlconn"
)

// SetWriter makes AddAddrs send its requests through w, a route netlink
// socket (nlconn.OpenWriter(unix.NETLINK_ROUTE)) of the device's network
// namespace, many to a sendmsg. Without one, AddAddrs is AddAddr for each.
func (k *Link) SetWriter(w *nlconn.Writer) { k.batch = w }

// AddAddrs implements Link.
func (k *Link) AddAddrs(ps []netip.Prefix, each func(i int, err error)) {
	if k.batch == nil {
		for i, p := range ps {
			each(i, k.AddAddr(p))
		}
		return
	}
	index := uint32(k.Index())
	k.batch.Do(len(ps), func(b []byte, i int, seq uint32) []byte {
		return appendNewAddr(b, seq, index, ps[i])
	}, func(i int, err error) {
		if err != nil && !errors.Is(err, unix.EEXIST) {
			each(i, fmt.Errorf("ip addr add %s dev %s: %w", ps[i], addrmgr.Device, err))
			return
		}
		each(i, nil)
	})
}

// appendNewAddr appends one RTM_NEWADDR request with sequence number seq
// to b: `ip addr add P dev INDEX`, as AddAddr makes it (toAddr):
// IFA_F_NOPREFIXROUTE, and for IPv6 IFA_F_NODAD with `preferred_lft 0
// valid_lft forever`. An address already there is EEXIST.
func appendNewAddr(b []byte, seq, index uint32, p netip.Prefix) []byte {
	m := nlconn.Begin(b, unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_EXCL, seq)
	a := p.Addr()
	family := byte(unix.AF_INET6)
	flags := uint32(unix.IFA_F_NOPREFIXROUTE)
	if a.Is4() {
		family = unix.AF_INET
	} else {
		flags |= unix.IFA_F_NODAD
	}
	// struct ifaddrmsg: family, prefix length, flags (the wide ones go in
	// IFA_FLAGS), scope (universe), index.
	ifa := [unix.SizeofIfAddrmsg]byte{family, byte(p.Bits())}
	binary.NativeEndian.PutUint32(ifa[4:], index)
	m.Raw(ifa[:]...)
	m.Addr(unix.IFA_LOCAL, a)
	m.Addr(unix.IFA_ADDRESS, a)
	m.Uint32(unix.IFA_FLAGS, flags)
	if !a.Is4() {
		// struct ifa_cacheinfo: preferred 0, valid forever, and the
		// timestamps the kernel ignores here.
		var ci [unix.SizeofIfaCacheinfo]byte
		binary.NativeEndian.PutUint32(ci[4:], infinityLifetime)
		m.Attr(unix.IFA_CACHEINFO, ci[:])
	}
	return m.End()
}
