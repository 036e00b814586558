package kernel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/ipvs-proxy/ipvs-proxy/internal/edge/nlconn"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// The virtual servers' dump (`ipvsadm -S -n` without the real servers),
// parsed message by message as the kernel sends them. moby/ipvs's
// GetServices keeps every message of the dump and parses it whole at the
// end: that held the whole dump live during every periodic full sync's
// read (the receive buffers and the parsed attributes), which set the
// proxy's peak memory (`make bench-vs-kube-proxy BENCHVS_MEMORY=DIR`,
// heap-max.pprof). Here each message is
// parsed into a VirtualServer and dropped.

// Generic netlink IPVS commands and attributes (linux/ip_vs.h).
const (
	ipvsCmdGetService  = 4 // IPVS_CMD_GET_SERVICE
	ipvsCmdAttrService = 1 // IPVS_CMD_ATTR_SERVICE

	ipvsSvcAttrAF        = 1  // IPVS_SVC_ATTR_AF
	ipvsSvcAttrProtocol  = 2  // IPVS_SVC_ATTR_PROTOCOL
	ipvsSvcAttrAddr      = 3  // IPVS_SVC_ATTR_ADDR
	ipvsSvcAttrPort      = 4  // IPVS_SVC_ATTR_PORT
	ipvsSvcAttrFWMark    = 5  // IPVS_SVC_ATTR_FWMARK
	ipvsSvcAttrSchedName = 6  // IPVS_SVC_ATTR_SCHED_NAME
	ipvsSvcAttrFlags     = 7  // IPVS_SVC_ATTR_FLAGS
	ipvsSvcAttrTimeout   = 8  // IPVS_SVC_ATTR_TIMEOUT
	ipvsSvcAttrStats     = 10 // IPVS_SVC_ATTR_STATS: 32-bit packet and connection counters
	ipvsSvcAttrStats64   = 12 // IPVS_SVC_ATTR_STATS64 (Linux 4.1): every counter 64-bit

	// The counters nested in either stats attribute (IPVS_STATS_ATTR_*).
	ipvsStatsConns    = 1
	ipvsStatsInPkts   = 2
	ipvsStatsOutPkts  = 3
	ipvsStatsInBytes  = 4
	ipvsStatsOutBytes = 5

	// genlHeaderLen is struct genlmsghdr: cmd, version, reserved.
	genlHeaderLen = 4
	// attrTypeMask drops NLA_F_NESTED and NLA_F_NET_BYTEORDER.
	attrTypeMask = 0x3fff
)

// errServiceMessage is wrapped by every dump message that does not parse.
var errServiceMessage = errors.New("malformed IPVS service message")

// dumper is the generic netlink socket and the IPVS family of the
// namespace the Table was opened in, for the streamed dump.
type dumper struct {
	sock   *nl.SocketHandle
	family uint16
}

// openDumper opens a generic netlink socket in the calling thread's
// network namespace, as moby/ipvs's New does for its own, and looks up the
// IPVS family.
func openDumper() (*dumper, error) {
	fam, err := netlink.GenlFamilyGet("IPVS")
	if err != nil {
		return nil, fmt.Errorf("generic netlink family IPVS: %w", err)
	}
	// With the library's timeouts: a dump the kernel never finishes
	// fails instead of holding the read forever.
	s, err := nlconn.OpenSocket(unix.NETLINK_GENERIC)
	if err != nil {
		return nil, err
	}
	return &dumper{sock: &nl.SocketHandle{Socket: s}, family: fam.ID}, nil
}

func (d *dumper) close() { d.sock.Close() }

// services dumps the virtual servers and calls each with every one of a
// protocol and address the proxy manages (no firewall marks), in the
// kernel's order, without real servers.
func (d *dumper) services(each func(ipvs.VirtualServer)) error {
	return d.servicesCounted(func(vs ipvs.VirtualServer, _ ipvs.Counters) { each(vs) })
}

// servicesCounted is services with each virtual server's counters, which
// every message of the dump carries.
func (d *dumper) servicesCounted(each func(ipvs.VirtualServer, ipvs.Counters)) error {
	req := nl.NewNetlinkRequest(int(d.family), unix.NLM_F_DUMP)
	req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_GENERIC: d.sock}
	req.AddData(&nl.Genlmsg{Command: ipvsCmdGetService, Version: 1})
	req.AddData(nl.NewRtAttr(ipvsCmdAttrService, nil))
	var perr error
	err := req.ExecuteIter(unix.NETLINK_GENERIC, d.family, func(msg []byte) bool {
		vs, c, ok, err := parseService(msg)
		if err != nil {
			perr = err
			return false
		}
		if ok {
			each(vs, c)
		}
		return true
	})
	if err == nil {
		err = perr
	}
	return err
}

// parseServiceMessage parses one IPVS_CMD_NEW_SERVICE message of the dump
// (the generic netlink header, then IPVS_CMD_ATTR_SERVICE with the
// service's attributes nested). ok is false for a firewall-mark service
// and for a protocol or address family the proxy never programs.
func parseServiceMessage(msg []byte) (vs ipvs.VirtualServer, ok bool, err error) {
	vs, _, ok, err = parseService(msg)
	return vs, ok, err
}

// parseService is parseServiceMessage with the service's counters: the
// 64-bit ones where the kernel sends them, else the 32-bit ones (whose
// connection and packet counters wrap at 2³²).
func parseService(msg []byte) (vs ipvs.VirtualServer, c ipvs.Counters, ok bool, err error) {
	if len(msg) < genlHeaderLen {
		return vs, c, false, fmt.Errorf("%w: %d bytes", errServiceMessage, len(msg))
	}
	attrs, err := nl.ParseRouteAttr(msg[genlHeaderLen:])
	if err != nil {
		return vs, c, false, fmt.Errorf("%w: %w", errServiceMessage, err)
	}
	var nested []byte
	for _, a := range attrs {
		if a.Attr.Type&attrTypeMask == ipvsCmdAttrService {
			nested = a.Value
		}
	}
	if nested == nil {
		return vs, c, false, fmt.Errorf("%w: no service attribute", errServiceMessage)
	}
	svc, err := nl.ParseRouteAttr(nested)
	if err != nil {
		return vs, c, false, fmt.Errorf("%w: %w", errServiceMessage, err)
	}
	var port uint16
	var addr, stats32, stats64 []byte
	var af, proto, fwmark, flags, timeout uint32
	for _, a := range svc {
		v := a.Value
		switch a.Attr.Type & attrTypeMask {
		case ipvsSvcAttrAF:
			af, err = hostUint(v, 2, err)
		case ipvsSvcAttrProtocol:
			proto, err = hostUint(v, 2, err)
		case ipvsSvcAttrAddr:
			addr = v
		case ipvsSvcAttrPort:
			if len(v) < 2 {
				err = fmt.Errorf("%w: port of %d bytes", errServiceMessage, len(v))
			} else {
				port = binary.BigEndian.Uint16(v)
			}
		case ipvsSvcAttrFWMark:
			fwmark, err = hostUint(v, 4, err)
		case ipvsSvcAttrSchedName:
			vs.Scheduler = nl.BytesToString(v)
		case ipvsSvcAttrFlags:
			// struct ip_vs_flags: the flags, then the mask.
			flags, err = hostUint(v, 4, err)
		case ipvsSvcAttrTimeout:
			timeout, err = hostUint(v, 4, err)
		case ipvsSvcAttrStats:
			stats32 = v
		case ipvsSvcAttrStats64:
			stats64 = v
		}
	}
	if err != nil {
		return vs, c, false, err
	}
	if fwmark != 0 {
		return vs, c, false, nil
	}
	p, known := protoFromNumber(uint16(proto))
	if !known {
		return vs, c, false, nil
	}
	if stats64 != nil {
		c, err = parseCounters(stats64, true)
	} else if stats32 != nil {
		c, err = parseCounters(stats32, false)
	}
	if err != nil {
		return vs, c, false, err
	}
	var a netip.Addr
	switch {
	case af == unix.AF_INET && len(addr) >= 4:
		a = netip.AddrFrom4([4]byte(addr[:4]))
	case af == unix.AF_INET6 && len(addr) >= 16:
		a = netip.AddrFrom16([16]byte(addr[:16]))
	default:
		return vs, c, false, nil
	}
	vs.Key = ipvs.Key{Protocol: p, Address: a.Unmap(), Port: port}
	vs.Flags = ipvs.Flags(flags) &^ ipvs.FlagHashed
	if vs.Flags&ipvs.FlagPersistent != 0 {
		vs.PersistenceTimeout = timeout
	}
	return vs, c, true, nil
}

// parseCounters parses a nested stats attribute: in IPVS_SVC_ATTR_STATS64
// every counter is 64-bit; in IPVS_SVC_ATTR_STATS the connections and
// packets are 32-bit, the bytes 64-bit. Rates are not kept.
func parseCounters(b []byte, wide bool) (ipvs.Counters, error) {
	var c ipvs.Counters
	attrs, err := nl.ParseRouteAttr(b)
	if err != nil {
		return c, fmt.Errorf("%w: stats: %v", errServiceMessage, err)
	}
	for _, a := range attrs {
		var dst *uint64
		size := 8
		switch a.Attr.Type & attrTypeMask {
		case ipvsStatsConns:
			dst = &c.Connections
		case ipvsStatsInPkts:
			dst = &c.InPackets
		case ipvsStatsOutPkts:
			dst = &c.OutPackets
		case ipvsStatsInBytes:
			dst = &c.InBytes
		case ipvsStatsOutBytes:
			dst = &c.OutBytes
		default:
			continue
		}
		if !wide && dst != &c.InBytes && dst != &c.OutBytes {
			size = 4
		}
		if len(a.Value) < size {
			return c, fmt.Errorf("%w: counter of %d bytes, want %d", errServiceMessage, len(a.Value), size)
		}
		if size == 4 {
			*dst = uint64(nl.NativeEndian().Uint32(a.Value))
		} else {
			*dst = nl.NativeEndian().Uint64(a.Value)
		}
	}
	return c, nil
}

// hostUint reads an attribute of size bytes (2 or 4) in host byte
// order, unless err is already set.
func hostUint(v []byte, size int, err error) (uint32, error) {
	if err != nil {
		return 0, err
	}
	if len(v) < size {
		return 0, fmt.Errorf("%w: attribute of %d bytes, want %d", errServiceMessage, len(v), size)
	}
	if size == 2 {
		return uint32(nl.NativeEndian().Uint16(v)), nil
	}
	return nl.NativeEndian().Uint32(v), nil
}
