package guard

import (
	"hash/maphash"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// Inputs is everything the guard protects. All fields are optional; the
// zero value protects only the never-a-VIP classes. Invalid addresses and
// prefixes are ignored, zones dropped, IPv4-mapped ones unmapped.
// planner.GuardInputs is the one place that fills it from the planning
// options and the Nodes.
type Inputs struct {
	// LocalAddrs are this node's addresses on every interface other than
	// kube-ipvs0 (`ip -o addr show` minus kube-ipvs0).
	LocalAddrs []netip.Addr
	// LocalPrefixes are the same addresses with their prefix lengths, when
	// known; the broadcast address of each IPv4 subnet is never a VIP.
	LocalPrefixes []netip.Prefix
	// Nodes are every Node's addresses (status.addresses), and those of
	// the deleted Nodes still remembered (model.Node.LastSeen set).
	Nodes []model.Node
	// APIServers are the API server's addresses (APIServer.Addrs).
	APIServers []netip.Addr
	// Gateways are the node's default gateways (`ip route show default`).
	Gateways []netip.Addr
	// NextHops are the gateways of the node's other routes (`ip route show
	// table main`).
	NextHops []netip.Addr
	// Resolvers are the node's DNS servers (/etc/resolv.conf).
	Resolvers []netip.Addr
	// StrictARP is --ipvs-strict-arp: without it the node answers ARP for
	// every kube-ipvs0 address on every link, and a VIP inside one of its
	// IPv4 LocalPrefixes gets a warning (Verdict.Warn).
	StrictARP bool
	// ProtectedCIDRs is --protected-cidrs.
	ProtectedCIDRs []netip.Prefix
	// PodCIDRs is --cluster-cidr: pod addresses are never VIPs. Every
	// Node's own pod ranges (model.Node.PodCIDRs) are never VIPs either,
	// with or without it.
	PodCIDRs []netip.Prefix
	// ServiceCIDRs is --service-cidrs: the API server allocates these
	// addresses to Services, so a Node address inside protects nothing
	// (TrustNodes), and none is ever a real server (CheckEndpoint).
	ServiceCIDRs []netip.Prefix
	// PlatformCIDRs is --protected-platform-cidrs: cloud platform
	// addresses beyond the built-in ones (PlatformAddrs), never a VIP nor
	// a real server.
	PlatformCIDRs []netip.Prefix
	// EndpointNamespaces is --node-endpoint-namespaces: the namespaces
	// whose Services may have an endpoint on a node's or the API server's
	// address at a protected node port (CheckEndpoint), besides the
	// default/kubernetes Service.
	EndpointNamespaces []string
	// ProtectedPorts is --protected-node-ports, Listeners the sockets the
	// node serves on: no node address served at L4 captures them
	// (CheckPort).
	ProtectedPorts []model.PortRange
	Listeners      []model.Listener
}

// Verdict is the guard's answer for one address.
type Verdict struct {
	// Protected is true when the address must never be bound on
	// kube-ipvs0.
	Protected bool
	// Reason is the refusal code (NodeIP, LinkLocal, ...) of a protected
	// address; "" otherwise.
	Reason model.Reason
	// Detail says why in words ("address of node n3; ...").
	Detail string
	// NeverVIP is true for a class that is never a service VIP at all (the
	// Special classes, a subnet broadcast address, a pod address): no
	// virtual server either. A protected address of a node may still be
	// served at L4 where it is local.
	NeverVIP bool
	// Node is the Node whose address it is, "" when none (set whatever
	// the Reason, for a protected address).
	Node string
	// Local is true when it is an address of an interface of this node
	// (set whatever the Reason, for a protected address).
	Local bool
	// Warn is true for an address that is not protected but deserves a
	// warning, with Reason and Detail saying why (OnLinkSubnet).
	Warn bool
}

// Guard answers which addresses must never be bound on kube-ipvs0. It is
// immutable after New and safe for concurrent use.
type Guard struct {
	local      map[netip.Addr]struct{}
	broadcast  map[netip.Addr]struct{}
	network    map[netip.Addr]struct{}
	peers      map[netip.Addr]struct{}
	nodes      map[netip.Addr]nodeRef
	apiServers map[netip.Addr]struct{}
	gateways   map[netip.Addr]struct{}
	nextHops   map[netip.Addr]struct{}
	resolvers  map[netip.Addr]struct{}
	protected  []netip.Prefix
	pods       []netip.Prefix
	// nodePods are every Node's pod ranges, with the Node, sorted.
	nodePods []nodePods
	services []netip.Prefix
	platform []netip.Prefix
	// endpointNS are the namespaces CheckEndpoint lets reach a node port.
	endpointNS []string
	// onLink are this node's subnets when strict ARP is off (nil with it).
	onLink []netip.Prefix
	// ports and listeners are CheckPort's.
	ports     []model.PortRange
	listeners []model.Listener

	fpOnce sync.Once
	fp     uint64
}

// New builds the guard of in.
func New(in Inputs) *Guard {
	g := &Guard{
		local:      addrSet(in.LocalAddrs),
		broadcast:  make(map[netip.Addr]struct{}),
		network:    make(map[netip.Addr]struct{}),
		peers:      make(map[netip.Addr]struct{}),
		nodes:      make(map[netip.Addr]nodeRef),
		apiServers: addrSet(in.APIServers),
		gateways:   addrSet(in.Gateways),
		nextHops:   addrSet(in.NextHops),
		resolvers:  addrSet(in.Resolvers),
		protected:  validPrefixes(in.ProtectedCIDRs),
		pods:       validPrefixes(in.PodCIDRs),
		services:   validPrefixes(in.ServiceCIDRs),
		platform:   validPrefixes(in.PlatformCIDRs),
		endpointNS: slices.Compact(slices.Sorted(slices.Values(in.EndpointNamespaces))),
	}
	var onLink []netip.Prefix
	for _, p := range in.LocalPrefixes {
		if !p.IsValid() {
			continue
		}
		g.local[Key(p.Addr())] = struct{}{}
		u, ok := UnmapPrefix(netip.PrefixFrom(p.Addr().WithZone(""), p.Bits()))
		if !ok {
			continue
		}
		a, bits, width := u.Addr(), u.Bits(), u.Addr().BitLen()
		switch {
		case bits == width-1: // /31, /127: the other end of the link
			g.peers[pairOf(a)] = struct{}{}
		case bits < width-1:
			g.network[u.Masked().Addr()] = struct{}{}
			if a.Is4() {
				g.broadcast[lastAddr4(u.Masked())] = struct{}{}
			}
		}
		// ARP only: IPv6 neighbour discovery answers for an address only
		// on the link that holds it, never for kube-ipvs0's.
		if a.Is4() && bits < width && !in.StrictARP {
			onLink = append(onLink, u)
		}
	}
	g.onLink = validPrefixes(onLink)
	g.ports = slices.Clone(in.ProtectedPorts)
	for _, l := range in.Listeners {
		if l.Addr.IsValid() {
			g.listeners = append(g.listeners, model.Listener{Protocol: l.Protocol, Addr: Key(l.Addr), Port: l.Port})
		}
	}
	slices.SortFunc(g.nodePods, compareNodePods)
	g.nodePods = slices.Compact(g.nodePods)
	// Sorted: CheckPort names the same listener whatever the input order.
	slices.SortFunc(g.listeners, model.CompareListeners)
	g.listeners = slices.Compact(g.listeners)
	for _, n := range in.Nodes {
		ref := nodeRef{name: n.Name, lastSeen: n.LastSeen.UTC()}
		for _, p := range validPrefixes(n.PodCIDRs) {
			g.nodePods = append(g.nodePods, nodePods{p, n.Name})
		}
		for _, a := range n.Addresses {
			// The trust order (TrustNodes): an address the API server
			// allocates to Services is no node's, whoever claims it.
			if !a.IsValid() || containsAny(g.services, Key(a)) {
				continue
			}
			// Where nodes share an address (or name it with and without
			// a zone) a Node in the API wins over a deleted one, then the
			// smallest name, whatever the input order.
			a = Key(a)
			if prev, ok := g.nodes[a]; !ok || ref.before(prev) {
				g.nodes[a] = ref
			}
		}
	}
	return g
}

// Check is the guard's verdict on addr. The never-a-VIP classes are
// checked first, then the broadcast and network addresses of the node's
// subnets, the pod CIDRs, node addresses, local addresses, API servers,
// default gateways, other next hops, point-to-point peers, resolvers and
// protected CIDRs; the first that matches gives the Reason. An address
// none protects inside one of the node's subnets, with strict ARP off, is
// a warning (OnLinkSubnet).
func (g *Guard) Check(addr netip.Addr) Verdict {
	if c := classOf(addr); c != nil {
		return Verdict{Protected: true, Reason: c.reason, Detail: c.vip, NeverVIP: true}
	}
	a := Key(addr)
	if what := platform(a, g.platform); what != "" {
		return Verdict{Protected: true, Reason: model.ReasonCloudPlatform, Detail: what + ": a cloud platform address is never a service VIP", NeverVIP: true}
	}
	if _, ok := g.broadcast[a]; ok {
		return Verdict{Protected: true, Reason: model.ReasonBroadcast, Detail: "broadcast address of a subnet of this node", NeverVIP: true}
	}
	if _, ok := g.network[a]; ok {
		return Verdict{Protected: true, Reason: model.ReasonNetworkAddress, Detail: "network address of a subnet of this node", NeverVIP: true}
	}
	for _, p := range g.pods {
		if p.Contains(a) {
			return Verdict{Protected: true, Reason: model.ReasonPodCIDR, Detail: "inside the pod network " + p.String(), NeverVIP: true}
		}
	}
	for _, np := range g.nodePods {
		if np.p.Contains(a) {
			return Verdict{Protected: true, Reason: model.ReasonPodCIDR, NeverVIP: true,
				Detail: "inside " + np.p.String() + ", the pod range of node " + model.Word(np.node) + " (spec.podCIDRs)"}
		}
	}
	node := g.nodes[a]
	v := Verdict{Node: node.name}
	_, v.Local = g.local[a]
	_, api := g.apiServers[a]
	_, gw := g.gateways[a]
	_, hop := g.nextHops[a]
	_, peer := g.peers[a]
	_, dns := g.resolvers[a]
	switch {
	case v.Node != "":
		v.Reason, v.Detail = model.ReasonNodeIP, "address of node "+node.String()+"; binding it on kube-ipvs0 would cut every node off from it"
	case v.Local:
		v.Reason, v.Detail = model.ReasonLocalAddress, "address of an interface of this node"
	case api:
		v.Reason, v.Detail = model.ReasonAPIServer, "address of the API server"
	case gw:
		v.Reason, v.Detail = model.ReasonGateway, "address of a default gateway of this node"
	case hop:
		v.Reason, v.Detail = model.ReasonGateway, "next hop of a route of this node (ip route show table main)"
	case peer:
		v.Reason, v.Detail = model.ReasonPeer, "the other end of a point-to-point link (/31, /127) of this node"
	case dns:
		v.Reason, v.Detail = model.ReasonResolver, "a DNS server of this node (/etc/resolv.conf)"
	default:
		for _, p := range g.protected {
			if p.Contains(a) {
				v.Reason, v.Detail = model.ReasonProtectedCIDR, "inside --protected-cidrs "+p.String()
				break
			}
		}
	}
	v.Protected = v.Reason != ""
	if !v.Protected {
		for _, p := range g.onLink {
			if p.Contains(a) {
				v.Warn, v.Reason = true, model.ReasonOnLinkSubnet
				v.Detail = "inside " + p.Masked().String() + ", a subnet on a link of this node: with --ipvs-strict-arp off every node answers ARP for it there, taking it from whoever owns it on that segment"
				break
			}
		}
	}
	return v
}

// pairOf is the other address of a /31 or /127: a with its last bit
// flipped.
func pairOf(a netip.Addr) netip.Addr {
	b := a.AsSlice()
	b[len(b)-1] ^= 1
	p, _ := netip.AddrFromSlice(b)
	return p
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
			entry('n', a, 0, n.String())
		}
		for a := range g.apiServers {
			entry('a', a, 0, "")
		}
		for a := range g.gateways {
			entry('g', a, 0, "")
		}
		for tag, set := range map[byte]map[netip.Addr]struct{}{'N': g.network, 'h': g.nextHops, 'r': g.peers, 'd': g.resolvers} {
			for a := range set {
				entry(tag, a, 0, "")
			}
		}
		for _, p := range g.onLink {
			entry('o', p.Addr(), p.Bits(), "")
		}
		for _, r := range g.ports {
			entry('P', netip.Addr{}, 0, r.String())
		}
		for _, l := range g.listeners {
			entry('L', l.Addr, 0, l.String())
		}
		for _, p := range g.protected {
			entry('p', p.Addr(), p.Bits(), "")
		}
		for _, p := range g.pods {
			entry('c', p.Addr(), p.Bits(), "")
		}
		for _, np := range g.nodePods {
			entry('C', np.p.Addr(), np.p.Bits(), np.node)
		}
		for _, p := range g.services {
			entry('s', p.Addr(), p.Bits(), "")
		}
		for _, p := range g.platform {
			entry('x', p.Addr(), p.Bits(), "")
		}
		for _, ns := range g.endpointNS {
			entry('e', netip.Addr{}, 0, ns)
		}
	})
	return g.fp
}

// nodePods is one pod range of a Node.
type nodePods struct {
	p    netip.Prefix
	node string
}

// compareNodePods orders pod ranges by address, widest first, then Node.
func compareNodePods(a, b nodePods) int {
	if c := a.p.Addr().Compare(b.p.Addr()); c != 0 {
		return c
	}
	if c := a.p.Bits() - b.p.Bits(); c != 0 {
		return c
	}
	return strings.Compare(a.node, b.node)
}

// nodeRef is the Node an address belongs to.
type nodeRef struct {
	name string
	// lastSeen is zero for a Node in the API.
	lastSeen time.Time
}

// before orders the Nodes that share an address: in the API first, then
// by name, then the later seen.
func (r nodeRef) before(o nodeRef) bool {
	if r.lastSeen.IsZero() != o.lastSeen.IsZero() {
		return r.lastSeen.IsZero()
	}
	if r.name != o.name {
		return r.name < o.name
	}
	return r.lastSeen.After(o.lastSeen)
}

// equal reports whether r and o are the same Node, seen alike.
func (r nodeRef) equal(o nodeRef) bool { return r.name == o.name && r.lastSeen.Equal(o.lastSeen) }

// String is the node's name (a model.Word: an odd name from a manifest is
// quoted), and for a deleted Node when it was last seen.
func (r nodeRef) String() string {
	if r.lastSeen.IsZero() {
		return model.Word(r.name)
	}
	return model.Word(r.name) + ", deleted from the API (last seen " + r.lastSeen.Format(time.RFC3339) + ")"
}

// Key is the form the guard knows an address by: no zone, and an
// IPv4-mapped address unmapped (a node, local, API server or gateway
// address written ::ffff:10.0.0.1, in a cache file of an older version or
// a careless input, protects 10.0.0.1). ChangedAddrs names addresses in
// it, and the planner records what it checks in it.
func Key(a netip.Addr) netip.Addr { return a.WithZone("").Unmap() }

func addrSet(as []netip.Addr) map[netip.Addr]struct{} {
	m := make(map[netip.Addr]struct{}, len(as))
	for _, a := range as {
		if a.IsValid() {
			m[Key(a)] = struct{}{}
		}
	}
	return m
}

// validPrefixes are the valid prefixes of ps, masked, an IPv4-mapped one
// as the IPv4 prefix it maps (UnmapPrefix), sorted by address, then widest
// first, so that a refusal's detail names the same prefix whatever the
// order of the flag's values. One IPv4-mapped prefix shorter than /96
// (which the flags reject) covers every IPv4-mapped address: it stands for
// every IPv4 address too, protecting too much rather than nothing.
func validPrefixes(ps []netip.Prefix) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ps))
	for _, p := range ps {
		if !p.IsValid() {
			continue
		}
		u, ok := UnmapPrefix(netip.PrefixFrom(p.Addr().WithZone(""), p.Bits()))
		if !ok {
			out = append(out, netip.PrefixFrom(netip.IPv4Unspecified(), 0))
		}
		out = append(out, u.Masked())
	}
	slices.SortFunc(out, comparePrefixes)
	return slices.Compact(out)
}

// comparePrefixes orders prefixes by address, then widest first.
func comparePrefixes(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

// containsAny reports whether a prefix of ps holds a.
func containsAny(ps []netip.Prefix, a netip.Addr) bool {
	return slices.ContainsFunc(ps, func(p netip.Prefix) bool { return p.Contains(a) })
}

// lastAddr4 is the highest address of an IPv4 prefix: its broadcast address.
func lastAddr4(p netip.Prefix) netip.Addr {
	b := p.Addr().As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v |= ^uint32(0) >> uint(p.Bits())
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
