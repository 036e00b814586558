//go:build linux

package nodeenv

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/edge/nlconn"
)

// Device is the dummy device the proxy binds VIPs on: its addresses are no
// addresses of the node (addrmgr.Device).
const Device = "kube-ipvs0"

// Env is what the node says before a sync.
type Env struct {
	// LocalAddrs are the node's addresses on interfaces other than
	// kube-ipvs0 (`ip -o addr show`), sorted and unique, without
	// link-local ones; LocalPrefixes the same with their lengths, in dump
	// order.
	LocalAddrs    []netip.Addr
	LocalPrefixes []netip.Prefix
	// LinkLocalAddrs are the node's link-local addresses (169.254.0.0/16,
	// fe80::/10) on interfaces other than kube-ipvs0, sorted and unique,
	// without zones. They are no NodePort address unless
	// --nodeport-addresses names a CIDR containing them (WithNodePortCIDRs),
	// but a NodePort virtual server on one (kube-proxy serves NodePorts on
	// IPv4 link-local addresses) is the proxy's to remove. Not compared
	// between syncs: every pod's host-side veth may add one.
	LinkLocalAddrs []netip.Addr
	// Gateways are the default routes' gateways of both families (`ip
	// route show default`), multipath hops included, sorted and unique.
	Gateways []netip.Addr
	// NextHops are the gateways of every other route of the main table
	// (`ip route show table main`: a BGP ToR's other sessions, a route
	// reflector, a second uplink), sorted, unique, none of Gateways.
	NextHops []netip.Addr
	// Resolvers are the node's DNS servers (ReadResolvers), sorted and
	// unique.
	Resolvers []netip.Addr
	// Listeners are the sockets the node serves on (ReadListeners).
	Listeners []model.Listener
}

// Handle reads the node: a route netlink handle for its links and
// routes, and an address dumper (internal/edge/nlconn) that skips kube-ipvs0's
// addresses before parsing them, both in the network namespace of the
// thread that opened it (NewHandle).
type Handle struct {
	nl    *netlink.Handle
	addrs *nlconn.AddrDumper
	// Strict is false when the kernel refused strict checking (before
	// 4.20): the handle works, every route read gets the whole table.
	Strict bool
}

// NewHandle opens a Handle in the calling thread's network namespace,
// with strict checking on, so that a filtered route dump returns the main
// table alone, not the local table's route of every kube-ipvs0 address.
func NewHandle() (*Handle, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	d, err := nlconn.OpenAddrDumper()
	if err != nil {
		h.Close()
		return nil, err
	}
	return &Handle{nl: h, addrs: d, Strict: h.SetStrictCheck(true) == nil}, nil
}

// Close closes the handle's sockets.
func (h *Handle) Close() {
	h.nl.Close()
	h.addrs.Close()
}

// Read reads the addresses and the routes through h, the resolvers from
// ResolvConfs and the listening sockets of the calling thread's network
// namespace.
func Read(h *Handle) (Env, error) {
	var env Env
	var err error
	if env.LocalAddrs, env.LocalPrefixes, env.LinkLocalAddrs, err = ReadAddrs(h); err != nil {
		return env, err
	}
	if env.Gateways, env.NextHops, err = ReadRoutes(h.nl); err != nil {
		return env, err
	}
	if env.Resolvers, err = ReadResolvers(ResolvConfs...); err != nil {
		return env, err
	}
	env.Listeners, err = ReadListeners()
	return env, err
}

// ReadAddrs is `ip -o addr show` without kube-ipvs0 (whose addresses are
// skipped by their messages' header, unparsed): the addresses that
// are not link-local, sorted and unique, their prefixes in dump order, and
// apart the link-local ones, sorted and unique, without zones. Link-local
// addresses are never a VIP or a family of the node, and every pod's
// host-side veth may get one: among the others, each pod start would look
// like a change of the node's addresses, which makes a sync a full one.
func ReadAddrs(h *Handle) (local []netip.Addr, prefixes []netip.Prefix, linkLocal []netip.Addr, err error) {
	var skip int
	if l, err := h.nl.LinkByName(Device); err == nil {
		skip = l.Attrs().Index
	}
	err = h.addrs.Dump(nlconn.AddrFilter{Except: skip}, func(a nlconn.Addr) {
		ip := a.Prefix.Addr().Unmap()
		if ip.IsLinkLocalUnicast() {
			linkLocal = append(linkLocal, ip)
			return
		}
		local = append(local, ip)
		prefixes = append(prefixes, netip.PrefixFrom(ip, a.Prefix.Bits()))
	})
	if err != nil {
		return nil, nil, nil, err
	}
	slices.SortFunc(local, netip.Addr.Compare)
	slices.SortFunc(linkLocal, netip.Addr.Compare)
	return slices.Compact(local), prefixes, slices.Compact(linkLocal), nil
}

// WithNodePortCIDRs returns env with the link-local addresses inside one
// of cidrs (--nodeport-addresses) added to LocalAddrs, sorted and unique:
// an operator who names such a CIDR gets NodePorts there, as kube-proxy
// serves them on every address its nodePortAddresses CIDRs contain. With
// no CIDR, or none containing a link-local address, env is returned as is.
func (env Env) WithNodePortCIDRs(cidrs []netip.Prefix) Env {
	var add []netip.Addr
	for _, a := range env.LinkLocalAddrs {
		if slices.ContainsFunc(cidrs, func(p netip.Prefix) bool { return p.Contains(a) }) {
			add = append(add, a)
		}
	}
	if len(add) == 0 {
		return env
	}
	env.LocalAddrs = slices.Concat(env.LocalAddrs, add)
	slices.SortFunc(env.LocalAddrs, netip.Addr.Compare)
	env.LocalAddrs = slices.Compact(env.LocalAddrs)
	return env
}

// ReadRoutes reads the main routing table of both families (`ip route
// show table main`) and returns the gateways of the default routes and the
// next hops of every other route, multipath hops included, each sorted and
// unique, a default gateway only in gateways. Only the main table is asked
// for: through a handle with strict checking (NewHandle) the kernel dumps
// that table alone, without the local table and its route of every
// kube-ipvs0 address.
func ReadRoutes(h *netlink.Handle) (gateways, nextHops []netip.Addr, err error) {
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		routes, err := h.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return nil, nil, fmt.Errorf("ip route show table main: %w", err)
		}
		for _, r := range routes {
			into := &nextHops
			if r.Dst == nil {
				into = &gateways
			} else if ones, _ := r.Dst.Mask.Size(); ones == 0 {
				into = &gateways
			}
			if gw, ok := netip.AddrFromSlice(r.Gw); ok && gw.IsValid() {
				*into = append(*into, gw.Unmap())
			}
			for _, nh := range r.MultiPath {
				if gw, ok := netip.AddrFromSlice(nh.Gw); ok && gw.IsValid() {
					*into = append(*into, gw.Unmap())
				}
			}
		}
	}
	slices.SortFunc(gateways, netip.Addr.Compare)
	gateways = slices.Compact(gateways)
	slices.SortFunc(nextHops, netip.Addr.Compare)
	nextHops = slices.DeleteFunc(slices.Compact(nextHops), func(a netip.Addr) bool {
		_, isGW := slices.BinarySearchFunc(gateways, a, netip.Addr.Compare)
		return isGW
	})
	return gateways, nextHops, nil
}
