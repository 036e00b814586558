package planner

import (
	"net/netip"
	"slices"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// NodePortPrimary is kube-proxy's --nodeport-addresses value that means
// the node's primary IPs (Options.NodePortPrimary).
const NodePortPrimary = "primary"

// Options are the node's identity and the planning flags `run` and `plan` share.
type Options struct {
	// NodeName is this node's name (--hostname-override, or --node-name for plan).
	NodeName string
	// LocalAddrs are this node's addresses on interfaces other than kube-ipvs0
	// (--node-ip for plan; read from the kernel by run).
	LocalAddrs []netip.Addr
	// LocalPrefixes are LocalAddrs with their prefix lengths, when known
	// (run reads them from the kernel); the IPv4 subnet broadcast addresses
	// they imply are never VIPs. Optional.
	LocalPrefixes []netip.Prefix
	// NodePortAddresses is --nodeport-addresses; empty means every local
	// address except loopback.
	NodePortAddresses []netip.Prefix
	// NodePortPrimary is --nodeport-addresses primary: NodePorts are served
	// on the node's primary IPs only (NodePrimaryIPs of this node's Node).
	NodePortPrimary bool
	// Scheduler is --ipvs-scheduler (default "rr").
	Scheduler string
	// ClusterCIDRs is --cluster-cidr: pod addresses, never a VIP, and the
	// source range treated as local traffic.
	ClusterCIDRs []netip.Prefix
	// ProtectedCIDRs is --protected-cidrs: never bound on kube-ipvs0.
	ProtectedCIDRs []netip.Prefix
	// ServiceCIDRs is --service-cidrs: the ranges the API server
	// allocates ClusterIPs from. No Node address or pod range inside
	// protects anything (guard.TrustNodes), no endpoint inside is a real
	// server.
	ServiceCIDRs []netip.Prefix
	// PlatformCIDRs is --protected-platform-cidrs: cloud platform
	// addresses beyond the built-in ones, never a VIP nor a real server.
	PlatformCIDRs []netip.Prefix
	// NodeEndpointNamespaces is --node-endpoint-namespaces: the namespaces
	// whose Services may have endpoints on a node's or the API server's
	// address at a protected node port (guard.CheckEndpoint).
	NodeEndpointNamespaces []string
	// MaxRealServersPerService is --max-real-servers-per-service, applied
	// by the conversion as MaxVirtualServersPerService is.
	MaxRealServersPerService int
	// APIServerAddrs are the API server endpoints the proxy talks to.
	APIServerAddrs []netip.Addr
	// Gateways are the node's default gateways.
	Gateways []netip.Addr
	// NextHops are the gateways of the node's other routes (main table).
	NextHops []netip.Addr
	// Resolvers are the node's DNS servers that are no Service IP.
	Resolvers []netip.Addr
	// StrictARP is --ipvs-strict-arp: without it a VIP inside one of
	// LocalPrefixes is bound with a warning (OnLinkSubnet).
	StrictARP bool
	// ProtectedNodePorts is --protected-node-ports; Listeners are the
	// sockets the node serves on (run reads them on full syncs): no node
	// address served at L4 (a NodePort, a local externalIP or LoadBalancer
	// IP) captures them.
	ProtectedNodePorts []model.PortRange
	Listeners          []model.Listener
	// ExcludeCIDRs is --ipvs-exclude-cidrs: virtual servers there are never
	// planned or touched.
	ExcludeCIDRs []netip.Prefix
	// RefuseNodeExternalIPs is --refuse-node-external-ips.
	RefuseNodeExternalIPs bool
	// MasqueradeAll is --masquerade-all.
	MasqueradeAll bool
	// MasqueradeBit is --iptables-masquerade-bit (default 14: mark 0x4000).
	MasqueradeBit int
	// MaxVirtualServersPerService is --max-virtual-servers-per-service.
	// It is applied when Services are converted (convert.Converter,
	// which `run` and `plan` build from it), before anything is planned,
	// so that an oversized Service costs its size and not its product;
	// Plan itself does not read it.
	MaxVirtualServersPerService int
}

// GuardInputs is what the node-IP guard protects for these options and
// nodes: the one place the guard's inputs are gathered, for the planner,
// `run`'s address manager, `plan` and `recover` alike.
func GuardInputs(o *Options, nodes []model.Node) guard.Inputs {
	return guard.Inputs{
		LocalAddrs:         o.LocalAddrs,
		LocalPrefixes:      o.LocalPrefixes,
		Nodes:              nodes,
		APIServers:         o.APIServerAddrs,
		Gateways:           o.Gateways,
		NextHops:           o.NextHops,
		Resolvers:          o.Resolvers,
		StrictARP:          o.StrictARP,
		ProtectedPorts:     o.ProtectedNodePorts,
		Listeners:          o.Listeners,
		ProtectedCIDRs:     o.ProtectedCIDRs,
		PodCIDRs:           o.ClusterCIDRs,
		ServiceCIDRs:       o.ServiceCIDRs,
		PlatformCIDRs:      o.PlatformCIDRs,
		EndpointNamespaces: o.NodeEndpointNamespaces,
	}
}

// TrustedNodes are nodes with what the trust order refuses of them taken
// out (guard.TrustNodes, against --service-cidrs and serviceIPs, the
// Services' ClusterIPs, sorted), and refusals with the trust order's own
// merged in, sorted. `run`, `plan` and `recover` all pass their Nodes
// through it before anything is planned or guarded.
func TrustedNodes(o *Options, nodes []model.Node, refusals []model.Refusal, serviceIPs []netip.Addr) ([]model.Node, []model.Refusal) {
	trusted, more := guard.TrustNodes(nodes, guard.Trust{ServiceCIDRs: o.ServiceCIDRs, ServiceIPs: serviceIPs})
	if len(more) == 0 {
		return trusted, refusals
	}
	all := append(slices.Clone(refusals), more...)
	slices.SortFunc(all, model.Refusal.Compare)
	return trusted, slices.Compact(all)
}

// nodePortCIDRs are the CIDRs NodePorts are served in, and whether they
// restrict them at all (an empty list otherwise means every local address):
// --nodeport-addresses, or with primary the node's primary IPs (none while
// this node's Node is unknown: nothing wider than kube-proxy would serve).
func nodePortCIDRs(o *Options, self *model.Node) ([]netip.Prefix, bool) {
	if !o.NodePortPrimary {
		return o.NodePortAddresses, len(o.NodePortAddresses) > 0
	}
	var out []netip.Prefix
	if self != nil {
		for _, a := range self.PrimaryIPs {
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	return out, true
}
