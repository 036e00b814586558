package planner

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// AddressKind is the field of a Service that asked for a virtual server.
type AddressKind string

// The address kinds, in the order a claim on one virtual server wins.
const (
	KindClusterIP    AddressKind = "ClusterIP"
	KindNodePort     AddressKind = "NodePort"
	KindLoadBalancer AddressKind = "LoadBalancerIP"
	KindExternalIP   AddressKind = "ExternalIP"
)

func (k vipKind) exported() AddressKind {
	return [...]AddressKind{KindClusterIP, KindNodePort, KindLoadBalancer, KindExternalIP}[k]
}

// EndpointList is which of a port's endpoint lists a virtual server's real
// servers are.
type EndpointList string

const (
	// ListCluster: the Cluster traffic policy, the cluster's endpoints.
	ListCluster EndpointList = "cluster"
	// ListLocal: the Local traffic policy, this node's endpoints (none
	// when this node has none and the address is a ClusterIP).
	ListLocal EndpointList = "local"
	// ListLocalFallback: the Local traffic policy with no endpoint on this
	// node: the cluster's, for the node itself and its pods only
	// (KUBE-EXTERNAL-NO-LOCAL keeps every other source out).
	ListLocalFallback EndpointList = "local-fallback"
)

// listKind is a claim's EndpointList.
type listKind uint8

const (
	listCluster listKind = iota
	listLocal
	listLocalFallback
)

func (l listKind) exported() EndpointList {
	return [...]EndpointList{ListCluster, ListLocal, ListLocalFallback}[l]
}

// ServiceShare is one Service's share of a plan, for `explain`: each port's
// claims on virtual servers, won or not, their ipset entries, and how the
// port's endpoints were chosen.
type ServiceShare struct {
	Ports []PortShare
}

// PortShare is one service port's share.
type PortShare struct {
	Port   model.ServicePort
	Claims []ClaimShare
	// Endpoints are the port's endpoints as this node chose them.
	Endpoints []EndpointChoice
	// Entries are the port's set entries outside its claims: the hairpin
	// entries (KUBE-LOOP-BACK, in the state while the port wins a virtual
	// server of their family) and the healthCheckNodePort.
	Entries []SetMember
}

// ClaimShare is one virtual server a service port asks for.
type ClaimShare struct {
	Kind AddressKind
	// VirtualServer is as it is programmed when the port wins it.
	VirtualServer ipvs.VirtualServer
	// Bound: its address goes on kube-ipvs0 (not a node address served
	// at L4).
	Bound bool
	List  EndpointList
	// Winner is the service port that has the virtual server when
	// another wins it (DuplicateVirtualServer), zero when this one does.
	Winner     model.ServicePortName
	WinnerKind AddressKind
	// Entries are the ipset entries it holds while it wins.
	Entries []SetMember
}

// SetMember is one entry of a named set.
type SetMember struct {
	Set   iptables.IPSet // Name, Type, Family, Comment; no Entries
	Entry iptables.Entry
}

// EndpointChoice is one endpoint and whether each of the port's lists
// took it.
type EndpointChoice struct {
	Endpoint model.Endpoint
	// Refused is the guard's refusal of the endpoint as a real server
	// (endpoints.addresses), nil when it has none.
	Refused *model.Refusal
	// Cluster and Local: in the Cluster and the Local policy's list, and
	// why not.
	Cluster, Local Choice
}

// Choice is whether a list took an endpoint, and why not.
type Choice struct {
	Chosen bool
	Why    string
}

// Share is Service key's share of the plan; ports and endpoints are what
// it was planned from (model.Cluster's). Call it after State. It reports
// false when the plan has no such Service.
func (inc *Incremental) Share(key types.NamespacedName, ports []model.ServicePort, endpoints map[model.ServicePortName][]model.Endpoint) (ServiceShare, bool) {
	frag := inc.services[key]
	if frag == nil {
		return ServiceShare{}, false
	}
	var out ServiceShare
	for i, pp := range frag.ports {
		ps := PortShare{}
		if i < len(ports) {
			ps.Port = ports[i]
			ps.Endpoints = inc.env.choices(&ports[i], endpoints[ports[i].Name])
		}
		for _, c := range pp.claims {
			cs := ClaimShare{Kind: c.kind.exported(), VirtualServer: c.vs, Bound: c.bind, List: c.list.exported(), Entries: inc.env.members(c.entries)}
			if w := inc.winners[c.vs.Key]; w != nil && w.port != pp {
				cs.Winner, cs.WinnerKind = w.port.name, w.kind.exported()
			}
			ps.Claims = append(ps.Claims, cs)
		}
		x := pp.more()
		for f := range x.loop {
			if pp.wins[f] > 0 {
				ps.Entries = append(ps.Entries, inc.env.members(x.loop[f])...)
			}
			ps.Entries = append(ps.Entries, inc.env.members(x.health[f])...)
		}
		out.Ports = append(out.Ports, ps)
	}
	return out, true
}

// Rulesets are the plan's iptables rules, one ruleset per family.
func (inc *Incremental) Rulesets() []iptables.Ruleset { return inc.env.rulesets }

func (e *env) members(es []setEntry) []SetMember {
	out := make([]SetMember, 0, len(es))
	for _, se := range es {
		out = append(out, SetMember{Set: newIPSet(setRef{fam: se.fam, spec: se.spec}, nil), Entry: se.e.entry()})
	}
	return out
}

// choices are the port's endpoints as the planner chose them, each list's
// answer with the reason an endpoint is left out. It plans the port again
// on the side: the plan keeps no endpoints.
func (e *env) choices(sp *model.ServicePort, eps []model.Endpoint) []EndpointChoice {
	p := &portPlanner{e: e, sp: sp, svcFam: serviceFamilies(sp), out: &portPlan{name: sp.Name}}
	p.eps = p.realServers(eps)
	out := make([]EndpointChoice, 0, len(eps))
	for j := range eps {
		ep := &eps[j]
		c := EndpointChoice{Endpoint: *ep}
		c.Cluster.Why, c.Local.Why = p.choose(ep, &c)
		out = append(out, c)
	}
	return out
}

// choose fills c's choices for endpoint ep and returns why each list left
// it out ("" where it took it).
func (p *portPlanner) choose(ep *model.Endpoint, c *EndpointChoice) (cluster, local string) {
	at := ipvsAddrPort(ipvs.Key{Address: ep.Address, Port: ep.Port})
	for _, r := range p.out.more().refusals {
		if r.Field == model.FieldEndpoint && r.Address == at {
			c.Refused = &r
			why := "refused: " + string(r.Reason)
			return why, why
		}
	}
	if !ep.Address.IsValid() || ep.Port == 0 || ep.Address.Is4In6() {
		return "no usable address and port", "no usable address and port"
	}
	f := famOf(ep.Address)
	if !p.e.families[f] {
		why := "this node plans no " + familyWord(ep.Address)
		return why, why
	}
	fe := p.endpoints(f)
	rs := ipvs.RealServer{Address: ep.Address.WithZone(""), Port: ep.Port, Weight: ipvs.DefaultWeight}
	has := func(l []ipvs.RealServer) bool {
		_, ok := slices.BinarySearchFunc(l, rs, ipvs.CompareRealServers)
		return ok
	}
	v := epView{fam: f, node: p.e.o.NodeName, zone: p.e.zone}
	c.Cluster.Chosen, c.Local.Chosen = has(fe.cluster), has(fe.local)
	if !c.Cluster.Chosen {
		cluster = v.whyNot(ep, fe.mode, "ready endpoints exist")
	}
	if !c.Local.Chosen {
		if !v.local(ep) {
			local = "on another node"
			if ep.NodeName != "" {
				local = "on node " + model.Word(ep.NodeName)
			}
		} else {
			local = v.whyNot(ep, topoNone, "this node has ready endpoints")
		}
	}
	return cluster, local
}

// whyNot is why a list of the view left endpoint e out under topology
// mode; readyExist says why a serving terminating one was.
func (v epView) whyNot(e *model.Endpoint, mode topoMode, readyExist string) string {
	switch {
	case !e.Ready && !e.Serving && e.Terminating:
		return "terminating, not serving"
	case !e.Ready && !e.Serving:
		return "not ready"
	case !e.Ready && e.Terminating:
		return "terminating: " + readyExist
	case !e.Ready:
		return "serving but not ready, not terminating"
	case mode == topoZone && !v.admits(mode, e):
		return "topology hints for zone " + strings.Join(e.ZoneHints, ",") + ", not this node's zone " + model.Word(v.zone)
	case mode == topoNode && !v.admits(mode, e):
		return "topology hints (PreferSameNode) for node " + strings.Join(e.NodeHints, ",") + ", not this node"
	}
	return "not chosen"
}
