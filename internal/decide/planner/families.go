package planner

import (
	"net/netip"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
)

// Which address families a node plans (docs/rules.md, "Families").

func famOf(a netip.Addr) int {
	if a.Is4() {
		return 0
	}
	return 1
}

var familyNames = [2]string{iptables.FamilyIPv4, iptables.FamilyIPv6}

// serviceAddr reports whether a is a unicast address that can carry a
// family for this node: not loopback, link-local, unspecified or multicast.
func serviceAddr(a netip.Addr) bool {
	return a.IsValid() && !a.Is4In6() && !a.IsLoopback() && !a.IsLinkLocalUnicast() &&
		!a.IsUnspecified() && !a.IsMulticast()
}

// planFamilies decides the families the node plans, from inputs `run` and
// `plan` share: a family is planned when the node has an address of it to
// serve from (local: a usable address on an interface, or a NodePort
// address) and the cluster's configuration names it — an address of this
// node in its Node object's status.addresses (kube-proxy's node IPs), or a
// CIDR of it in --cluster-cidr or --nodeport-addresses (what kube-proxy
// reads as dual-stack configuration). When nothing names a family (no Node
// object for this node, no such flag), the local addresses alone decide.
// So an IPv6 address on some interface does not make an IPv4-only
// cluster's node plan IPv6, as it did when only `run` saw it.
func planFamilies(local [2]bool, self *model.Node, o *Options) [2]bool {
	var named [2]bool
	if self != nil {
		for _, a := range self.Addresses {
			if serviceAddr(a) {
				named[famOf(a)] = true
			}
		}
	}
	for _, cidrs := range [][]netip.Prefix{o.ClusterCIDRs, o.NodePortAddresses} {
		for _, p := range cidrs {
			if p.IsValid() && !p.Addr().Is4In6() {
				named[famOf(p.Addr())] = true
			}
		}
	}
	if !named[0] && !named[1] {
		return local
	}
	return [2]bool{local[0] && named[0], local[1] && named[1]}
}
