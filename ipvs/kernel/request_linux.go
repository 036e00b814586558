package kernel

import (
	"encoding/binary"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// The IPVS requests the Table sends several to a sendmsg (writer), encoded
// here into one buffer. moby/ipvs builds each request as a tree of
// attributes and sends it alone; its encoders are unexported.

// Generic netlink IPVS commands and attributes for real servers
// (linux/ip_vs.h).
const (
	ipvsCmdNewDest  = 5 // IPVS_CMD_NEW_DEST
	ipvsCmdAttrDest = 2 // IPVS_CMD_ATTR_DEST

	ipvsDestAttrAddr      = 1 // IPVS_DEST_ATTR_ADDR
	ipvsDestAttrPort      = 2 // IPVS_DEST_ATTR_PORT
	ipvsDestAttrFwdMethod = 3 // IPVS_DEST_ATTR_FWD_METHOD
	ipvsDestAttrWeight    = 4 // IPVS_DEST_ATTR_WEIGHT
	ipvsDestAttrUThresh   = 5 // IPVS_DEST_ATTR_U_THRESH
	ipvsDestAttrLThresh   = 6 // IPVS_DEST_ATTR_L_THRESH

	// ipvsConnFMasq is IP_VS_CONN_F_MASQ, `ipvsadm -m`: the only
	// forwarding method the proxy programs.
	ipvsConnFMasq = 0

	// nlmsgHeaderLen is struct nlmsghdr; nlattrHeaderLen struct nlattr.
	nlmsgHeaderLen  = unix.SizeofNlMsghdr
	nlattrHeaderLen = unix.SizeofNlAttr
)

// appendNewDest appends one IPVS_CMD_NEW_DEST request with sequence number
// seq to b: `ipvsadm -a -t VIP:PORT -r ADDR:PORT -m -w WEIGHT`, with no
// connection thresholds. The virtual server is named by its key alone (the
// kernel looks it up; the scheduler and flags belong to `ipvsadm -A`).
func appendNewDest(b []byte, family uint16, seq uint32, k ipvs.Key, rs ipvs.RealServer) []byte {
	start := len(b)
	b = appendHeader(b, family, seq, ipvsCmdNewDest)

	svc := len(b)
	b = appendAttr(b, unix.NLA_F_NESTED|ipvsCmdAttrService, nil)
	af := uint16(unix.AF_INET6)
	if k.Address.Is4() {
		af = unix.AF_INET
	}
	b = appendUint16Attr(b, ipvsSvcAttrAF, af)
	b = appendUint16Attr(b, ipvsSvcAttrProtocol, protoNumber(k.Protocol))
	b = appendAddrAttr(b, ipvsSvcAttrAddr, k.Address)
	b = appendPortAttr(b, ipvsSvcAttrPort, k.Port)
	b = endNest(b, svc)

	dest := len(b)
	b = appendAttr(b, unix.NLA_F_NESTED|ipvsCmdAttrDest, nil)
	b = appendAddrAttr(b, ipvsDestAttrAddr, rs.Address)
	b = appendPortAttr(b, ipvsDestAttrPort, rs.Port)
	b = appendUint32Attr(b, ipvsDestAttrFwdMethod, ipvsConnFMasq)
	b = appendUint32Attr(b, ipvsDestAttrWeight, uint32(rs.Weight))
	b = appendUint32Attr(b, ipvsDestAttrUThresh, 0)
	b = appendUint32Attr(b, ipvsDestAttrLThresh, 0)
	b = endNest(b, dest)

	binary.NativeEndian.PutUint32(b[start:], uint32(len(b)-start))
	return b
}

// appendHeader appends a request's netlink header (its length patched by
// the caller) and generic netlink header: the request asks for an
// acknowledgement, which carries seq.
func appendHeader(b []byte, family uint16, seq uint32, cmd uint8) []byte {
	b = binary.NativeEndian.AppendUint32(b, 0) // nlmsg_len
	b = binary.NativeEndian.AppendUint16(b, family)
	b = binary.NativeEndian.AppendUint16(b, unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	b = binary.NativeEndian.AppendUint32(b, seq)
	b = binary.NativeEndian.AppendUint32(b, 0) // nlmsg_pid: the kernel fills in the sender
	return append(b, cmd, 1, 0, 0)
}

// appendAttr appends one attribute, padded to four bytes. A nested
// attribute is appended empty and closed with endNest.
func appendAttr(b []byte, typ uint16, v []byte) []byte {
	b = binary.NativeEndian.AppendUint16(b, uint16(nlattrHeaderLen+len(v)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, v...)
	for len(b)%unix.NLA_ALIGNTO != 0 {
		b = append(b, 0)
	}
	return b
}

// appendUint16Attr appends a 16-bit attribute in host byte order.
func appendUint16Attr(b []byte, typ, v uint16) []byte {
	var a [2]byte
	binary.NativeEndian.PutUint16(a[:], v)
	return appendAttr(b, typ, a[:])
}

// appendUint32Attr appends a 32-bit attribute in host byte order.
func appendUint32Attr(b []byte, typ uint16, v uint32) []byte {
	var a [4]byte
	binary.NativeEndian.PutUint32(a[:], v)
	return appendAttr(b, typ, a[:])
}

// appendPortAttr appends a port, in network byte order as IPVS wants it.
func appendPortAttr(b []byte, typ, port uint16) []byte {
	var a [2]byte
	binary.BigEndian.PutUint16(a[:], port)
	return appendAttr(b, typ, a[:])
}

// appendAddrAttr appends an address: 4 bytes for IPv4, 16 for IPv6.
func appendAddrAttr(b []byte, typ uint16, addr netip.Addr) []byte {
	if addr.Is4() {
		a := addr.As4()
		return appendAttr(b, typ, a[:])
	}
	a := addr.As16()
	return appendAttr(b, typ, a[:])
}

// endNest sets the length of the nested attribute that starts at start to
// everything appended since.
func endNest(b []byte, start int) []byte {
	binary.NativeEndian.PutUint16(b[start:], uint16(len(b)-start))
	return b
}
