package planner

import (
	"net/netip"
	"slices"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
)

// entryKey is an ipset entry as the plan holds it while it counts it: 38 B
// against the 80 of an iptables.Entry (whose addresses carry a zone pointer
// and whose protocol is a string), in every claim's entries and as the
// key of the set counts (counted; see BenchmarkMemoryBreakdown). The
// state's sets are iptables.Entry lists still (entry).
//
// It holds every entry the planner builds: their protocol is none, TCP,
// UDP or SCTP (portPlanner.service refuses any other before the port
// claims anything), and an address's zone, which no ipset entry has, is
// dropped.
type entryKey struct {
	ip, net [16]byte
	port    uint16
	// ipFam and netFam are 0 for the zero address, 4 or 6.
	ipFam, netFam uint8
	// netBits is the prefix length plus one: 0 for no prefix.
	netBits uint8
	// proto is the protocol's index in entryProtocols.
	proto uint8
}

// entryProtocols are the protocols of the planner's entries, by their
// index in a key: none, then model.Protocols.
var entryProtocols = [...]model.Protocol{"", model.Protocols[0], model.Protocols[1], model.Protocols[2]}

// keyOf is e's entryKey, and false for an entry of a protocol outside
// entryProtocols, which the planner never builds (portPlanner.service
// refuses the port first) and add refuses if it ever did. An address's
// zone is not kept: the kernel's ipset entries have none.
func keyOf(e iptables.Entry) (entryKey, bool) {
	k := entryKey{port: e.Port}
	i := slices.Index(entryProtocols[:], e.Protocol)
	if i < 0 {
		return entryKey{}, false
	}
	k.proto = uint8(i)
	k.ip, k.ipFam = addrBytes(e.IP)
	if e.Net.IsValid() {
		k.net, k.netFam = addrBytes(e.Net.Addr())
		k.netBits = uint8(e.Net.Bits() + 1)
	}
	return k, true
}

// entry is the iptables.Entry of k.
func (k entryKey) entry() iptables.Entry {
	e := iptables.Entry{IP: bytesAddr(k.ip, k.ipFam), Protocol: entryProtocols[k.proto], Port: k.port}
	if k.netBits > 0 {
		e.Net = netip.PrefixFrom(bytesAddr(k.net, k.netFam), int(k.netBits)-1)
	}
	return e
}

// addrBytes is a's 16 bytes as netip holds them (an IPv4 address mapped)
// and its family: 4, 6, or 0 for the zero address.
func addrBytes(a netip.Addr) ([16]byte, uint8) {
	switch {
	case a.Is4():
		return a.As16(), 4
	case a.Is6():
		return a.As16(), 6
	}
	return [16]byte{}, 0
}

// bytesAddr is addrBytes undone.
func bytesAddr(b [16]byte, fam uint8) netip.Addr {
	switch fam {
	case 4:
		return netip.AddrFrom16(b).Unmap()
	case 6:
		return netip.AddrFrom16(b)
	}
	return netip.Addr{}
}
