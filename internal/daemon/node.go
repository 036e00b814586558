package daemon

import (
	"fmt"
	"net/netip"
	"slices"
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/internal/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/planner"
)

// NetlinkEnv reads the node's addresses on every interface but kube-ipvs0
// (`ip -o addr show`) and the gateways of its default routes (`ip route
// show default`, both families) through h.
func NetlinkEnv(h *netlink.Handle) func() (Env, error) {
	return func() (Env, error) {
		var env Env
		addrs, err := h.AddrList(nil, netlink.FAMILY_ALL)
		if err != nil {
			return env, fmt.Errorf("ip addr show: %w", err)
		}
		skip := -1
		if l, err := h.LinkByName(addrmgr.Device); err == nil {
			skip = l.Attrs().Index
		}
		for _, a := range addrs {
			if a.LinkIndex == skip || a.IPNet == nil {
				continue
			}
			ip, ok := netip.AddrFromSlice(a.IP)
			if !ok {
				continue
			}
			ip = ip.Unmap()
			ones, _ := a.Mask.Size()
			env.LocalAddrs = append(env.LocalAddrs, ip)
			env.LocalPrefixes = append(env.LocalPrefixes, netip.PrefixFrom(ip, ones))
		}
		for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
			routes, err := h.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
			if err != nil {
				return env, fmt.Errorf("ip route show default: %w", err)
			}
			for _, r := range routes {
				if r.Dst != nil {
					if ones, _ := r.Dst.Mask.Size(); ones != 0 {
						continue
					}
				}
				if gw, ok := netip.AddrFromSlice(r.Gw); ok && gw.IsValid() {
					env.Gateways = append(env.Gateways, gw.Unmap())
				}
				for _, nh := range r.MultiPath {
					if gw, ok := netip.AddrFromSlice(nh.Gw); ok && gw.IsValid() {
						env.Gateways = append(env.Gateways, gw.Unmap())
					}
				}
			}
		}
		slices.SortFunc(env.LocalAddrs, netip.Addr.Compare)
		env.LocalAddrs = slices.Compact(env.LocalAddrs)
		slices.SortFunc(env.Gateways, netip.Addr.Compare)
		env.Gateways = slices.Compact(env.Gateways)
		return env, nil
	}
}

// Guard is the address manager's node-IP guard, rebuilt from the same
// inputs as the planner's before every sync (node addresses change while
// the proxy runs). It satisfies addrmgr.Protector and is safe for
// concurrent use.
type Guard struct {
	g atomic.Pointer[addrmgr.Guard]
}

var _ addrmgr.Protector = (*Guard)(nil)

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

// Check implements addrmgr.Protector: protected is true when the guard
// does not allow addr on kube-ipvs0. (addrmgr.Guard.Check answers
// "allowed"; Protector asks "protected".)
func (g *Guard) Check(addr netip.Addr) (reason model.Reason, detail string, protected bool) {
	reason, detail, allowed := g.g.Load().Check(addr)
	return reason, detail, !allowed
}
