package nlconn

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// The parts of an RTM_NEWADDR message the parse reads (linux/if_addr.h,
// linux/rtnetlink.h): struct ifaddrmsg, then route attributes.
const (
	ifaddrmsgLen = 8 // struct ifaddrmsg
	rtattrLen    = 4 // struct rtattr
	ifaAddress   = 1 // IFA_ADDRESS
	ifaLocal     = 2 // IFA_LOCAL
	afInet       = 2
	afInet6      = 10
)

// linkIndex is the message's ifa_index, read before anything else so a
// filtered-out address costs no parse; false when msg is too short.
func linkIndex(msg []byte) (int, bool) {
	if len(msg) < ifaddrmsgLen {
		return 0, false
	}
	return int(binary.NativeEndian.Uint32(msg[4:8])), true
}

// parseAddr reads one RTM_NEWADDR message (without its netlink header).
// ok is false for an address of a family other than IPv4 and IPv6.
func parseAddr(msg []byte) (a Addr, ok bool, err error) {
	index, ok := linkIndex(msg)
	if !ok {
		return a, false, fmt.Errorf("%w: %d bytes", ErrAddrMessage, len(msg))
	}
	family, bits := msg[0], int(msg[1])
	var size int
	switch family {
	case afInet:
		size = 4
	case afInet6:
		size = 16
	default:
		return a, false, nil
	}
	var address, local []byte
	for b := msg[ifaddrmsgLen:]; len(b) >= rtattrLen; {
		n := int(binary.NativeEndian.Uint16(b[0:2]))
		if n < rtattrLen || n > len(b) {
			return a, false, fmt.Errorf("%w: attribute of %d bytes in %d", ErrAddrMessage, n, len(b))
		}
		switch binary.NativeEndian.Uint16(b[2:4]) {
		case ifaAddress:
			address = b[rtattrLen:n]
		case ifaLocal:
			local = b[rtattrLen:n]
		}
		// Attributes are aligned to 4 bytes.
		b = b[min((n+3)&^3, len(b)):]
	}
	ip := local
	if ip == nil {
		ip = address
	}
	if len(ip) != size {
		return a, false, fmt.Errorf("%w: %d-byte address of family %d", ErrAddrMessage, len(ip), family)
	}
	addr, _ := netip.AddrFromSlice(ip)
	if bits > addr.BitLen() {
		return a, false, fmt.Errorf("%w: prefix length %d of %s", ErrAddrMessage, bits, addr)
	}
	return Addr{LinkIndex: index, Prefix: netip.PrefixFrom(addr, bits)}, true, nil
}
