package recovery

import (
	"net/netip"

	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// Node is what the kernel of one node says, as recover reads it.
type Node struct {
	// LocalPrefixes are the addresses of every interface but kube-ipvs0
	// (`ip -o addr show` minus kube-ipvs0 and link-local addresses).
	LocalPrefixes []netip.Prefix
	// LinkLocalAddrs are the link-local ones (nodeenv.Env): a NodePort
	// virtual server there is the proxy's to remove.
	LinkLocalAddrs []netip.Addr
	// Gateways are the default routes' gateways (`ip route show default`,
	// `ip -6 route show default`), multipath hops included; NextHops the
	// gateways of the other routes of the main table.
	Gateways, NextHops []netip.Addr
	// Resolvers are the node's DNS servers (/etc/resolv.conf).
	Resolvers []netip.Addr
	// HasDevice is false when there is no kube-ipvs0 at all.
	HasDevice bool
	// Bound are kube-ipvs0's addresses.
	Bound []netip.Prefix
	// HasIPVS is false when ip_vs is not loaded; VirtualServers is then empty.
	HasIPVS bool
	// VirtualServers is the IPVS table (`ipvsadm -S -n`).
	VirtualServers []ipvs.VirtualServer
}

// LocalAddrs are LocalPrefixes' addresses.
func (n *Node) LocalAddrs() []netip.Addr {
	out := make([]netip.Addr, len(n.LocalPrefixes))
	for i, p := range n.LocalPrefixes {
		out[i] = p.Addr()
	}
	return out
}
