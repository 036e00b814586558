package planner

import (
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
)

// firewall appends the source-range entries of the LoadBalancer virtual
// server e (family f) to es, as `ipset add` would:
//
//	KUBE-LOAD-BALANCER-FW           lbIP,proto:port          the firewall applies
//	KUBE-LOAD-BALANCER-SOURCE-CIDR  lbIP,proto:port,range    per range of family f
//	KUBE-LOAD-BALANCER-SOURCE-IP    lbIP,proto:port,lbIP     a range holds a node address
//
// The firewall applies whenever the Service asked for source ranges, even
// when none of them is usable for family f (only IPv6 ranges for an IPv4
// address, an IPv4-mapped range the conversion did not unmap, ranges that
// all failed to parse): the address is then in KUBE-LOAD-BALANCER-FW with
// no source entry, and KUBE-SOURCE-RANGES-FIREWALL drops every packet.
// A restriction that cannot be expressed fails closed, never open.
func (p *portPlanner) firewall(es []setEntry, f int, e iptables.Entry) []setEntry {
	sp := p.sp
	if !sp.LoadBalancerFirewall && len(sp.LoadBalancerSourceRanges) == 0 {
		return es
	}
	es = p.add(es, f, iptables.SetLoadBalancerFW, e)
	fromNode := false
	for _, r := range sp.LoadBalancerSourceRanges {
		if !r.IsValid() || r.Addr().Is4In6() || famOf(r.Addr()) != f {
			continue
		}
		r = r.Masked()
		src := e
		src.Net = r
		es = p.add(es, f, iptables.SetLoadBalancerSourceCIDR, src)
		if !fromNode {
			for _, a := range p.e.o.LocalAddrs {
				if r.Contains(a.WithZone("")) {
					fromNode = true
					break
				}
			}
		}
	}
	if fromNode {
		self := e
		self.Net = iptables.HostPrefix(e.IP)
		es = p.add(es, f, iptables.SetLoadBalancerSourceIP, self)
	}
	return es
}
