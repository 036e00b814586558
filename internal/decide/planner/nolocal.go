package planner

import "github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"

// NoLocal counts the Services of one family that kube-proxy 1.34's IPVS
// proxier counts in sync_proxy_rules_no_local_endpoints_total, by its
// traffic_policy label: those with a virtual server whose Local traffic
// policy found no endpoint on this node while the port has ready (or
// serving and terminating) endpoints elsewhere. Each such Service counts
// once per policy that is Local, whichever of its virtual servers found
// none: with both policies Local, a ClusterIP without a local endpoint
// counts it as external too, as kube-proxy's syncEndpoint does.
type NoLocal struct {
	Internal, External int
}

// noLocalPolicies are the policies a Service counts under: a bit set.
type noLocalPolicies uint8

const (
	noLocalInternal noLocalPolicies = 1 << iota
	noLocalExternal
)

// noLocalOf are the Local policies of sp.
func noLocalOf(sp *model.ServicePort) noLocalPolicies {
	var p noLocalPolicies
	if sp.InternalPolicyLocal {
		p |= noLocalInternal
	}
	if sp.ExternalPolicyLocal {
		p |= noLocalExternal
	}
	return p
}

// noLocalCount is NoLocal for each family, kept up to date by update.
type noLocalCount [2]NoLocal

// move adds (d = +1) or removes (d = -1) one Service's policies.
func (c *noLocalCount) move(ps [2]noLocalPolicies, d int) {
	for f, p := range ps {
		if p&noLocalInternal != 0 {
			c[f].Internal += d
		}
		if p&noLocalExternal != 0 {
			c[f].External += d
		}
	}
}

// NoLocalEndpoints counts, for IPv4 (index 0) and IPv6, the Services with
// a Local traffic policy and no endpoint on this node (see NoLocal).
func (inc *Incremental) NoLocalEndpoints() [2]NoLocal { return inc.noLocal }
