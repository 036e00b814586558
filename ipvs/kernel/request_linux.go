package kernel

import (
	"golang.org/x/sys/unix"

	"github.com/ipvs-proxy/ipvs-proxy/internal/nlbatch"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// The IPVS requests the Table sends many to a sendmsg (internal/nlbatch).
// moby/ipvs builds each request as a tree of attributes and sends it
// alone; its encoders are unexported.

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
)

// appendNewDest appends one IPVS_CMD_NEW_DEST request with sequence number
// seq to b: `ipvsadm -a -t VIP:PORT -r ADDR:PORT -m -w WEIGHT`, with no
// connection thresholds. The virtual server is named by its key alone (the
// kernel looks it up; the scheduler and flags belong to `ipvsadm -A`).
func appendNewDest(b []byte, family uint16, seq uint32, k ipvs.Key, rs ipvs.RealServer) []byte {
	m := nlbatch.Begin(b, family, 0, seq)
	m.Raw(ipvsCmdNewDest, 1, 0, 0) // struct genlmsghdr: cmd, version, reserved

	svc := m.Nest(unix.NLA_F_NESTED | ipvsCmdAttrService)
	af := uint16(unix.AF_INET6)
	if k.Address.Is4() {
		af = unix.AF_INET
	}
	m.Uint16(ipvsSvcAttrAF, af)
	m.Uint16(ipvsSvcAttrProtocol, protoNumber(k.Protocol))
	m.Addr(ipvsSvcAttrAddr, k.Address)
	m.Port(ipvsSvcAttrPort, k.Port)
	m.EndNest(svc)

	dest := m.Nest(unix.NLA_F_NESTED | ipvsCmdAttrDest)
	m.Addr(ipvsDestAttrAddr, rs.Address)
	m.Port(ipvsDestAttrPort, rs.Port)
	m.Uint32(ipvsDestAttrFwdMethod, ipvsConnFMasq)
	m.Uint32(ipvsDestAttrWeight, uint32(rs.Weight))
	m.Uint32(ipvsDestAttrUThresh, 0)
	m.Uint32(ipvsDestAttrLThresh, 0)
	m.EndNest(dest)
	return m.End()
}
