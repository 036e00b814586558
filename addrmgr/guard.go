package addrmgr

// The node-IP guard: pure code deciding which addresses may be bound on
// kube-ipvs0. The daemon, the applier (immediately before each bind), the
// planner and `recover` all use it.

import (
	"hash/maphash"
	"net/netip"
	"slices"
	"sync"

	"github.com/ipvs-proxy/ipvs-proxy/internal/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/model"
)

// GuardConfig is everything the node-IP guard protects. All fields are
// optional; the zero value protects only the never-a-VIP classes.
type GuardConfig struct {
	// LocalAddrs are this node's addresses on every interface other than
	// kube-ipvs0 (`ip -o addr show` minus kube-ipvs0).
	LocalAddrs []netip.Addr
	// LocalPrefixes are the same addresses with their prefix lengths; the
	// broadcast address of each IPv4 subnet is never a VIP.
	LocalPrefixes []netip.Prefix
	// NodeAddrs maps every address in any Node's status.addresses to the
	// node's name (see NodeAddresses).
	NodeAddrs map[netip.Addr]string
	// APIServers are the API server endpoints the proxy talks to.
	APIServers []netip.Addr
	// Gateways are the node's default gateways (`ip route show default`).
	Gateways []netip.Addr
	// ProtectedCIDRs is --protected-cidrs.
	ProtectedCIDRs []netip.Prefix
	// PodCIDRs is --cluster-cidr: pod addresses are never VIPs.
	PodCIDRs []netip.Prefix
}

// Guard decides whether an address may be bound on kube-ipvs0. It is
// immutable after NewGuard and safe for concurrent use.
type Guard struct {
	local      map[netip.Addr]struct{}
	broadcast  map[netip.Addr]struct{}
	nodes      map[netip.Addr]string
	apiServers map[netip.Addr]struct{}
	gateways   map[netip.Addr]struct{}
	protected  []netip.Prefix
	pods       []netip.Prefix

	fpOnce sync.Once
	fp     uint64
}

// fpSeed seeds every guard's fingerprint in this process.
var fpSeed = maphash.MakeSeed()

// Fingerprint is a hash of everything the guard protects: two guards with
// the same fingerprint answer every Check the same (but for a 64-bit hash
// collision). Computed once, on first use, in O(what it protects).
func (g *Guard) Fingerprint() uint64 {
	g.fpOnce.Do(func() {
		var h maphash.Hash
		h.SetSeed(fpSeed)
		// Order-independent: the sum of one hash per entry, each entry
		// tagged with what it is.
		entry := func(tag byte, a netip.Addr, bits int, name string) {
			h.Reset()
			h.WriteByte(tag)
			b := a.As16()
			h.Write(b[:])
			h.WriteByte(byte(bits))
			h.WriteString(name)
			g.fp += h.Sum64()
		}
		for a := range g.local {
			entry('l', a, 0, "")
		}
		for a := range g.broadcast {
			entry('b', a, 0, "")
		}
		for a, n := range g.nodes {
			entry('n', a, 0, n)
		}
		for a := range g.apiServers {
			entry('a', a, 0, "")
		}
		for a := range g.gateways {
			entry('g', a, 0, "")
		}
		for _, p := range g.protected {
			entry('p', p.Addr(), p.Bits(), "")
		}
		for _, p := range g.pods {
			entry('c', p.Addr(), p.Bits(), "")
		}
	})
	return g.fp
}

// NewGuard builds a Guard from cfg. Invalid addresses and prefixes in cfg
// are ignored; zones are dropped.
func NewGuard(cfg GuardConfig) *Guard {
	g := &Guard{
		local:      addrSet(cfg.LocalAddrs),
		broadcast:  make(map[netip.Addr]struct{}),
		nodes:      make(map[netip.Addr]string, len(cfg.NodeAddrs)),
		apiServers: addrSet(cfg.APIServers),
		gateways:   addrSet(cfg.Gateways),
		protected:  validPrefixes(cfg.ProtectedCIDRs),
		pods:       validPrefixes(cfg.PodCIDRs),
	}
	for _, p := range cfg.LocalPrefixes {
		if !p.IsValid() {
			continue
		}
		g.local[norm(p.Addr())] = struct{}{}
		u, ok := guard.UnmapPrefix(netip.PrefixFrom(p.Addr().WithZone(""), p.Bits()))
		if ok && u.Addr().Is4() && u.Bits() < 31 {
			g.broadcast[lastAddr4(u.Masked())] = struct{}{}
		}
	}
	for a, n := range cfg.NodeAddrs {
		if !a.IsValid() {
			continue
		}
		// Keys that differ only in their zone name one address: the
		// smallest node name wins, whatever the map's order.
		if prev, ok := g.nodes[norm(a)]; !ok || n < prev {
			g.nodes[norm(a)] = n
		}
	}
	return g
}

// NodeAddresses maps every address in the nodes' status.addresses to the node
// name; where nodes share an address, the smallest name wins so the result
// does not depend on input order.
func NodeAddresses(nodes []model.Node) map[netip.Addr]string {
	m := make(map[netip.Addr]string)
	for _, n := range nodes {
		for _, a := range n.Addresses {
			if !a.IsValid() {
				continue
			}
			a = norm(a)
			if old, ok := m[a]; !ok || n.Name < old {
				m[a] = n.Name
			}
		}
	}
	return m
}

// NeverVIP reports whether a Check reason marks an address class that is
// never a service VIP at all (as opposed to a protected address of a node,
// which may still be served at L4 where it is local).
func NeverVIP(r model.Reason) bool {
	switch r {
	case model.ReasonInvalidAddress, model.ReasonUnspecified, model.ReasonLoopback,
		model.ReasonMulticast, model.ReasonBroadcast, model.ReasonLinkLocal,
		model.ReasonIPv4Mapped, model.ReasonPodCIDR:
		return true
	}
	return false
}

// Check reports whether addr may be bound on kube-ipvs0. allowed is false
// for a protected address, with the reason code and a human-readable detail;
// it is true (with empty reason and detail) otherwise. The never-a-VIP
// classes are checked first, then node addresses, local addresses, API
// servers, gateways and protected CIDRs. Note the third result is
// "allowed", the opposite of Protector's; Guard.Protector adapts it.
func (g *Guard) Check(addr netip.Addr) (reason model.Reason, detail string, allowed bool) {
	if !addr.IsValid() {
		return model.ReasonInvalidAddress, "not an IP address", false
	}
	if addr.Is4In6() {
		return model.ReasonIPv4Mapped, "IPv4-mapped IPv6 addresses are never service VIPs", false
	}
	a := norm(addr)
	switch {
	case a.IsUnspecified():
		return model.ReasonUnspecified, "the unspecified address is never a service VIP", false
	case a.IsLoopback():
		return model.ReasonLoopback, "loopback addresses are never service VIPs", false
	case a.IsMulticast():
		return model.ReasonMulticast, "multicast addresses are never service VIPs", false
	case a == limitedBroadcast:
		return model.ReasonBroadcast, "the limited broadcast address is never a service VIP", false
	case a.IsLinkLocalUnicast():
		return model.ReasonLinkLocal, "link-local addresses (169.254.169.254 is the cloud metadata service) are never service VIPs", false
	}
	if _, ok := g.broadcast[a]; ok {
		return model.ReasonBroadcast, "broadcast address of a subnet of this node", false
	}
	for _, p := range g.pods {
		if p.Contains(a) {
			return model.ReasonPodCIDR, "inside the pod network " + p.String(), false
		}
	}
	if n, ok := g.nodes[a]; ok {
		return model.ReasonNodeIP, "address of node " + n + "; binding it on kube-ipvs0 would cut every node off from it", false
	}
	if _, ok := g.local[a]; ok {
		return model.ReasonLocalAddress, "address of an interface of this node", false
	}
	if _, ok := g.apiServers[a]; ok {
		return model.ReasonAPIServer, "address of the API server", false
	}
	if _, ok := g.gateways[a]; ok {
		return model.ReasonGateway, "address of a default gateway of this node", false
	}
	for _, p := range g.protected {
		if p.Contains(a) {
			return model.ReasonProtectedCIDR, "inside --protected-cidrs " + p.String(), false
		}
	}
	return "", "", true
}

// IsNodeAddress reports whether addr is in some Node's status.addresses, and
// which node's.
func (g *Guard) IsNodeAddress(addr netip.Addr) (nodeName string, ok bool) {
	if !addr.IsValid() {
		return "", false
	}
	nodeName, ok = g.nodes[norm(addr)]
	return nodeName, ok
}

// IsLocal reports whether addr is an address of an interface of this node
// other than kube-ipvs0.
func (g *Guard) IsLocal(addr netip.Addr) bool {
	if !addr.IsValid() {
		return false
	}
	_, ok := g.local[norm(addr)]
	return ok
}

var limitedBroadcast = netip.AddrFrom4([4]byte{255, 255, 255, 255})

// norm drops the zone and unmaps an IPv4-mapped address: a node, local,
// API server or gateway address written ::ffff:10.0.0.1 (a cache file of
// an older version, a careless input) protects 10.0.0.1.
func norm(a netip.Addr) netip.Addr { return a.WithZone("").Unmap() }

func addrSet(as []netip.Addr) map[netip.Addr]struct{} {
	m := make(map[netip.Addr]struct{}, len(as))
	for _, a := range as {
		if a.IsValid() {
			m[norm(a)] = struct{}{}
		}
	}
	return m
}

// validPrefixes are the valid prefixes of ps, masked, an IPv4-mapped one
// as the IPv4 prefix it maps (guard.UnmapPrefix). One shorter than /96
// (which the flags reject) covers every IPv4-mapped address: it stands for
// every IPv4 address too, protecting too much rather than nothing.
func validPrefixes(ps []netip.Prefix) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ps))
	for _, p := range ps {
		if !p.IsValid() {
			continue
		}
		u, ok := guard.UnmapPrefix(netip.PrefixFrom(p.Addr().WithZone(""), p.Bits()))
		if !ok {
			out = append(out, netip.PrefixFrom(netip.IPv4Unspecified(), 0))
		}
		out = append(out, u.Masked())
	}
	// By address, then widest first: the detail of a refusal names the
	// same prefix whatever the order of the flag's values.
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return slices.Compact(out)
}

// lastAddr4 is the highest address of an IPv4 prefix: its broadcast address.
func lastAddr4(p netip.Prefix) netip.Addr {
	b := p.Addr().As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v |= ^uint32(0) >> uint(p.Bits())
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
