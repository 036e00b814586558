package kernel

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// Conntrack deletes flows through a netlink handle (ctnetlink) of the
// namespace it was opened in.
//
// Which flows: with net.ipv4.vs.conntrack=1 IPVS keeps a conntrack entry per
// connection whose original direction is client -> VIP:port and whose reply
// direction IPVS rewrites to come from the real server. So the filter is
// protocol + original destination VIP + original destination port + reply
// source = endpoint address, as kube-proxy's filterForNAT does; matching the
// reply source alone would also hit flows of other services sharing the
// endpoint.
type Conntrack struct {
	h *netlink.Handle
}

// OpenConntrack opens a netfilter netlink handle in the calling thread's
// network namespace.
func OpenConntrack() (*Conntrack, error) {
	h, err := netlink.NewHandle(unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("open conntrack netlink socket: %w", err)
	}
	return &Conntrack{h: h}, nil
}

// Close closes the handle.
func (c *Conntrack) Close() { c.h.Close() }

// DeleteFlows implements ipvs.Conntrack.
func (c *Conntrack) DeleteFlows(proto model.Protocol, vip netip.Addr, port uint16, endpoint netip.Addr) (int, error) {
	f := &netlink.ConntrackFilter{}
	var err error
	switch proto {
	case model.UDP:
		err = f.AddProtocol(unix.IPPROTO_UDP)
	case model.SCTP:
		err = f.AddProtocol(unix.IPPROTO_SCTP)
	default:
		err = f.AddProtocol(unix.IPPROTO_TCP)
	}
	if err == nil {
		err = f.AddIP(netlink.ConntrackOrigDstIP, net.IP(vip.AsSlice()))
	}
	if err == nil {
		err = f.AddPort(netlink.ConntrackOrigDstPort, port)
	}
	if err == nil {
		err = f.AddIP(netlink.ConntrackReplySrcIP, net.IP(endpoint.AsSlice()))
	}
	if err != nil {
		return 0, fmt.Errorf("conntrack filter for %s %s: %w", proto, netip.AddrPortFrom(vip, port), err)
	}
	family := netlink.InetFamily(unix.AF_INET)
	if vip.Is6() {
		family = unix.AF_INET6
	}
	n, err := c.h.ConntrackDeleteFilters(netlink.ConntrackTable, family, f)
	if err != nil {
		return int(n), fmt.Errorf("conntrack -D -p %s --orig-dst %s --orig-port-dst %d --reply-src %s: %w", proto, vip, port, endpoint, err)
	}
	return int(n), nil
}
