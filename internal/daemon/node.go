package daemon

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/internal/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/planner"
)

// NodeEnv reads the node's addresses on every interface but kube-ipvs0
// (`ip -o addr show`) and the gateways of its default routes (`ip route
// show default`, both families) through a netlink handle.
//
// The addresses are cached: with 10,000 service addresses on kube-ipvs0 an
// address dump is most of a partial sync's own work, and the node's
// addresses rarely change. A partial sync reads them again only after
// Changed says an address of another link came or went, and only while
// someone follows them (Changed(false) was called, not yet Changed(true));
// a full sync always reads them. The default routes are read every time.
// Safe for concurrent use.
type NodeEnv struct {
	// readAddrs and readGateways are the dumps (netlink; fakes in tests).
	readAddrs    func() ([]netip.Addr, []netip.Prefix, error)
	readGateways func() ([]netip.Addr, error)

	mu sync.Mutex
	// gen counts Changed calls: a dump overtaken by one is not cached.
	gen      uint64
	followed bool
	cached   bool
	addrs    []netip.Addr
	prefixes []netip.Prefix
}

// NewNodeEnv reads through h; nothing is cached until Changed(false).
func NewNodeEnv(h *netlink.Handle) *NodeEnv {
	return &NodeEnv{readAddrs: func() ([]netip.Addr, []netip.Prefix, error) { return netlinkAddrs(h) },
		readGateways: func() ([]netip.Addr, error) { return netlinkGateways(h) }}
}

// Changed tells the cache that the node's addresses may have changed;
// lost says that changes may go unreported until the next Changed(false).
// addrmgr.KernelLink.OtherLinks calls it.
func (e *NodeEnv) Changed(lost bool) {
	e.mu.Lock()
	e.gen++
	e.followed = !lost
	e.cached = false
	e.mu.Unlock()
}

// Read returns the node's addresses and default gateways; full reads the
// addresses from the kernel even if they are cached.
func (e *NodeEnv) Read(full bool) (Env, error) {
	var env Env
	e.mu.Lock()
	hit := !full && e.cached && e.followed
	gen := e.gen
	if hit {
		env.LocalAddrs, env.LocalPrefixes = e.addrs, e.prefixes
	}
	e.mu.Unlock()
	if !hit {
		var err error
		if env.LocalAddrs, env.LocalPrefixes, err = e.readAddrs(); err != nil {
			return env, err
		}
		e.mu.Lock()
		// A change reported during the dump may be missing from it: cache
		// only what no report has overtaken.
		if e.gen == gen && e.followed {
			e.addrs, e.prefixes, e.cached = env.LocalAddrs, env.LocalPrefixes, true
		}
		e.mu.Unlock()
	}
	gws, err := e.readGateways()
	if err != nil {
		return env, err
	}
	env.Gateways = gws
	return env, nil
}

// netlinkAddrs is `ip -o addr show` without kube-ipvs0 and without
// link-local addresses: addresses sorted and unique, prefixes in dump
// order. Link-local addresses are never a VIP, a NodePort address or a
// family of the node, and every pod's host-side veth may get one: kept,
// each pod start would look like a change of the node's addresses, which
// makes a sync a full one.
func netlinkAddrs(h *netlink.Handle) ([]netip.Addr, []netip.Prefix, error) {
	addrs, err := h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, nil, fmt.Errorf("ip addr show: %w", err)
	}
	skip := -1
	if l, err := h.LinkByName(addrmgr.Device); err == nil {
		skip = l.Attrs().Index
	}
	var local []netip.Addr
	var prefixes []netip.Prefix
	for _, a := range addrs {
		if a.LinkIndex == skip || a.IPNet == nil {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if ip.IsLinkLocalUnicast() {
			continue
		}
		ones, _ := a.Mask.Size()
		local = append(local, ip)
		prefixes = append(prefixes, netip.PrefixFrom(ip, ones))
	}
	slices.SortFunc(local, netip.Addr.Compare)
	return slices.Compact(local), prefixes, nil
}

// netlinkGateways is `ip route show default` of both families: sorted,
// unique. Only the main table is asked for: through a handle with strict
// checking the kernel dumps that table alone, without the local table and
// its route of every kube-ipvs0 address.
func netlinkGateways(h *netlink.Handle) ([]netip.Addr, error) {
	var gws []netip.Addr
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		routes, err := h.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return nil, fmt.Errorf("ip route show default: %w", err)
		}
		for _, r := range routes {
			if r.Dst != nil {
				if ones, _ := r.Dst.Mask.Size(); ones != 0 {
					continue
				}
			}
			if gw, ok := netip.AddrFromSlice(r.Gw); ok && gw.IsValid() {
				gws = append(gws, gw.Unmap())
			}
			for _, nh := range r.MultiPath {
				if gw, ok := netip.AddrFromSlice(nh.Gw); ok && gw.IsValid() {
					gws = append(gws, gw.Unmap())
				}
			}
		}
	}
	slices.SortFunc(gws, netip.Addr.Compare)
	return slices.Compact(gws), nil
}

// Guard is the address manager's node-IP guard, rebuilt from the same
// inputs as the planner's before every sync (node addresses change while
// the proxy runs). It satisfies addrmgr.Protector and is safe for
// concurrent use.
type Guard struct {
	g atomic.Pointer[addrmgr.Guard]
}

var (
	_ addrmgr.Protector     = (*Guard)(nil)
	_ addrmgr.Fingerprinter = (*Guard)(nil)
)

// NewGuard returns a guard protecting only the never-a-VIP classes until
// the first Update.
func NewGuard() *Guard {
	g := &Guard{}
	g.g.Store(addrmgr.NewGuard(addrmgr.GuardConfig{}))
	return g
}

// Update rebuilds the guard from the planning options and the nodes, as
// planner.Plan builds its own.
func (g *Guard) Update(o *planner.Options, nodes []model.Node) {
	g.g.Store(addrmgr.NewGuard(GuardConfig(o, nodes)))
}

// GuardConfig is what planner.Plan protects, as an addrmgr.GuardConfig.
func GuardConfig(o *planner.Options, nodes []model.Node) addrmgr.GuardConfig {
	return addrmgr.GuardConfig{
		LocalAddrs:     o.LocalAddrs,
		LocalPrefixes:  o.LocalPrefixes,
		NodeAddrs:      addrmgr.NodeAddresses(nodes),
		APIServers:     o.APIServerAddrs,
		Gateways:       o.Gateways,
		ProtectedCIDRs: o.ProtectedCIDRs,
		PodCIDRs:       o.ClusterCIDRs,
	}
}

// Fingerprint implements addrmgr.Fingerprinter: the guard in force's, so
// the address manager checks the bound addresses again only when it changed.
func (g *Guard) Fingerprint() uint64 { return g.g.Load().Fingerprint() }

// Check implements addrmgr.Protector: protected is true when the guard
// does not allow addr on kube-ipvs0. (addrmgr.Guard.Check answers
// "allowed"; Protector asks "protected".)
func (g *Guard) Check(addr netip.Addr) (reason model.Reason, detail string, protected bool) {
	reason, detail, allowed := g.g.Load().Check(addr)
	return reason, detail, !allowed
}
