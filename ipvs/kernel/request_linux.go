package kernel

import (
	"encoding/binary"

	"golang.org/x/sys/unix"

	"github.com/ipvs-proxy/ipvs-proxy/internal/edge/nlconn"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// The IPVS requests the Table sends many to a sendmsg (internal/edge/nlconn).
// moby/ipvs builds each request as a tree of attributes and sends it
// alone; its encoders are unexported.

// Generic netlink IPVS commands and attributes for real servers, and the
// service attributes of `ipvsadm -A` (linux/ip_vs.h).
const (
	ipvsCmdNewService = 1 // IPVS_CMD_NEW_SERVICE

	ipvsSvcAttrNetmask = 9 // IPVS_SVC_ATTR_NETMASK

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

// appendNewService appends one IPVS_CMD_NEW_SERVICE request with sequence
// number seq to b: `ipvsadm -A -t VIP:PORT -s SCHED [-p TIMEOUT]`, with the
// attributes moby/ipvs's NewService sends (toService): the flags without
// IP_VS_SVC_F_HASHED under a full mask, the host netmask.
func appendNewService(b []byte, family uint16, seq uint32, vs ipvs.VirtualServer) []byte {
	m := nlconn.Begin(b, family, 0, seq)
	m.Raw(ipvsCmdNewService, 1, 0, 0)
	svc := m.Nest(unix.NLA_F_NESTED | ipvsCmdAttrService)
	af, netmask := uint16(unix.AF_INET6), uint32(128)
	if vs.Address.Is4() {
		af, netmask = unix.AF_INET, 0xffffffff
	}
	m.Uint16(ipvsSvcAttrAF, af)
	m.Uint16(ipvsSvcAttrProtocol, protoNumber(vs.Protocol))
	m.Addr(ipvsSvcAttrAddr, vs.Address)
	m.Port(ipvsSvcAttrPort, vs.Port)
	m.Attr(ipvsSvcAttrSchedName, append([]byte(vs.Scheduler), 0))
	var flags [8]byte // struct ip_vs_flags: flags, mask
	binary.NativeEndian.PutUint32(flags[:], uint32(vs.Flags&^ipvs.FlagHashed))
	binary.NativeEndian.PutUint32(flags[4:], 0xffffffff)
	m.Attr(ipvsSvcAttrFlags, flags[:])
	m.Uint32(ipvsSvcAttrTimeout, vs.PersistenceTimeout)
	m.Uint32(ipvsSvcAttrNetmask, netmask)
	m.EndNest(svc)
	return m.End()
}

// appendNewDest appends one IPVS_CMD_NEW_DEST request with sequence number
// seq to b: `ipvsadm -a -t VIP:PORT -r ADDR:PORT -m -w WEIGHT`, with no
// connection thresholds. The virtual server is named by its key alone (the
// kernel looks it up; the scheduler and flags belong to `ipvsadm -A`).
func appendNewDest(b []byte, family uint16, seq uint32, k ipvs.Key, rs ipvs.RealServer) []byte {
	m := nlconn.Begin(b, family, 0, seq)
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
