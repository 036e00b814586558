package recovery

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	addrkernel "github.com/ipvs-proxy/ipvs-proxy/addrmgr/kernel"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/edge/nodeenv"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	iptableskernel "github.com/ipvs-proxy/ipvs-proxy/iptables/kernel"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	ipvskernel "github.com/ipvs-proxy/ipvs-proxy/ipvs/kernel"
)

// procIPVS exists when the ip_vs module is loaded.
const procIPVS = "/proc/net/ip_vs"

// Kernel is the kernel of the network namespace it was opened in. It never
// creates kube-ipvs0 and never loads ip_vs.
type Kernel struct {
	h *netlink.Handle
	// env reads the node's addresses and routes (nodeenv.NewHandle: the
	// main routing table alone, as `run` reads it).
	env   *nodeenv.Handle
	link  *addrkernel.Link
	table *ipvskernel.Table
}

// OpenKernel opens netlink (and IPVS, when ip_vs is loaded) in the calling
// thread's network namespace; lock the thread there first.
func OpenKernel() (*Kernel, error) {
	h, err := netlink.NewHandle()
	if err != nil {
		return nil, fmt.Errorf("open netlink: %w", err)
	}
	k := &Kernel{h: h}
	if k.env, err = nodeenv.NewHandle(); err != nil {
		h.Close()
		return nil, err
	}
	if _, err := h.LinkByName(addrmgr.Device); err == nil {
		if k.link, err = addrkernel.EnsureDevice(h); err != nil {
			k.Close()
			return nil, err
		}
	} else if !errors.As(err, new(netlink.LinkNotFoundError)) {
		k.Close()
		return nil, fmt.Errorf("ip link show %s: %w", addrmgr.Device, err)
	}
	if _, err := os.Stat(procIPVS); err == nil {
		if k.table, err = ipvskernel.Open(); err != nil {
			k.Close()
			return nil, err
		}
	}
	return k, nil
}

// Close releases the sockets.
func (k *Kernel) Close() {
	if k.table != nil {
		k.table.Close()
	}
	if k.env != nil {
		k.env.Close()
	}
	k.h.Close()
}

// Link is kube-ipvs0, or nil when there is none.
func (k *Kernel) Link() addrmgr.Link {
	if k.link == nil {
		return nil
	}
	return k.link
}

// Table is the IPVS table, or nil when ip_vs is not loaded.
func (k *Kernel) Table() ipvs.Table {
	if k.table == nil {
		return nil
	}
	return k.table
}

// Read dumps the node: interfaces' addresses and default gateways (as
// `run` reads them, nodeenv.Read), kube-ipvs0 and the IPVS table.
func (k *Kernel) Read() (*Node, error) {
	n := &Node{HasDevice: k.link != nil, HasIPVS: k.table != nil}
	env, err := nodeenv.Read(k.env)
	if err != nil {
		return nil, err
	}
	n.LocalPrefixes = slices.Clone(env.LocalPrefixes)
	slices.SortFunc(n.LocalPrefixes, model.ComparePrefix)
	n.Gateways, n.NextHops, n.Resolvers, n.LinkLocalAddrs = env.Gateways, env.NextHops, env.Resolvers, env.LinkLocalAddrs
	if k.link != nil {
		if n.Bound, err = k.link.Addrs(); err != nil {
			return nil, fmt.Errorf("ip addr show dev %s: %w", addrmgr.Device, err)
		}
		slices.SortFunc(n.Bound, model.ComparePrefix)
	}
	if k.table != nil {
		if n.VirtualServers, err = k.table.Services(); err != nil {
			return nil, fmt.Errorf("ipvsadm -S -n: %w", err)
		}
	}
	return n, nil
}

// RetireSources gives each address's local route (`ip route replace local
// ADDR dev kube-ipvs0 table local src NODE-ADDR`) the node's address as
// preferred source: a connection this node opens to the address takes that
// one as its source, and the replies to those that took the address itself
// are still delivered.
func (k *Kernel) RetireSources(src map[netip.Prefix]netip.Addr) error {
	if k.link == nil {
		return nil
	}
	dev, err := k.h.LinkByName(addrmgr.Device)
	if err != nil {
		return fmt.Errorf("ip link show %s: %w", addrmgr.Device, err)
	}
	var errs []error
	for p, a := range src {
		r := &netlink.Route{LinkIndex: dev.Attrs().Index, Dst: netlink.NewIPNet(p.Addr().AsSlice()), Src: a.AsSlice(),
			Type: unix.RTN_LOCAL, Table: unix.RT_TABLE_LOCAL, Scope: netlink.SCOPE_HOST, Protocol: unix.RTPROT_KERNEL}
		if err := k.h.RouteReplace(r); err != nil {
			errs = append(errs, fmt.Errorf("ip route replace local %s dev %s table local src %s: %w", p.Addr(), addrmgr.Device, a, err))
		}
	}
	return errors.Join(errs...)
}

// OpenConnsFrom counts the TCP connections of the connection table
// (`conntrack -L`) whose original source is one of addrs and that are not
// in TIME_WAIT or CLOSE; only the families of addrs are read. Other
// protocols are not waited for: a datagram lost is sent again.
func (k *Kernel) OpenConnsFrom(addrs []netip.Addr) (int, error) {
	var n int
	for _, fam := range []netlink.InetFamily{unix.AF_INET, unix.AF_INET6} {
		if !slices.ContainsFunc(addrs, func(a netip.Addr) bool { return a.Is4() == (fam == unix.AF_INET) }) {
			continue
		}
		flows, err := k.h.ConntrackTableList(netlink.ConntrackTable, fam)
		if err != nil {
			return 0, fmt.Errorf("conntrack -L -f %d: %w", fam, err)
		}
		for _, f := range flows {
			tcp, ok := f.ProtoInfo.(*netlink.ProtoInfoTCP)
			if !ok || f.Forward.Protocol != unix.IPPROTO_TCP || tcp.State == tcpConntrackTimeWait || tcp.State == tcpConntrackClose {
				continue
			}
			if src, ok := netip.AddrFromSlice(f.Forward.SrcIP); ok && slices.Contains(addrs, src.Unmap()) {
				n++
			}
		}
	}
	return n, nil
}

// The conntrack TCP states a connection no longer sends data in
// (include/uapi/linux/netfilter/nf_conntrack_tcp.h).
const (
	tcpConntrackTimeWait = 7
	tcpConntrackClose    = 8
)

// DeleteDevice is `ip link del kube-ipvs0`, with its addresses.
func (k *Kernel) DeleteDevice() error { return addrkernel.DeleteDevice(k.h) }

// openRules opens the proxy's ipsets and chains in the calling thread's
// namespace (iptables/kernel.NewSyncer).
func openRules(log *zap.Logger) (*iptables.Syncer, error) { return iptableskernel.NewSyncer(log) }
