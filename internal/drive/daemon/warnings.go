package daemon

import "github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"

// rangeWarnings are the warnings run logs once at start for the address
// ranges it was not told: without them the guard knows less of what is
// never a VIP and what no Node can claim.
func rangeWarnings(o *planner.Options) []string {
	var out []string
	if len(o.ClusterCIDRs) == 0 {
		out = append(out, "--cluster-cidr unknown: only the Nodes' own pod ranges (spec.podCIDRs) are protected as pod addresses, a pod on a node without one may be taken for a VIP; traffic from pods to ClusterIPs is masqueraded as from outside the cluster")
	}
	if len(o.ServiceCIDRs) == 0 {
		out = append(out, "--service-cidrs unknown: a Node address or an endpoint is checked against the Services' ClusterIPs alone, so a Node claiming an address of the service range not yet allocated protects it until a Service gets it")
	}
	return out
}
