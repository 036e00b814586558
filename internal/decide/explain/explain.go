// Package explain owns `ipvs-proxy explain`'s answer for one Service on one
// node: what the plan programs for it and why (each virtual server and its
// real servers, the endpoints each traffic policy chose and why not the
// others, the guard's verdict on each address, every refusal, the ipset
// entries and the rules that match their sets) and how the kernel compares.
// It is pure: the plan comes from internal/decide/nodeplan, the kernel through the
// Reader the caller opens.
package explain

import (
	"errors"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/nodeplan"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// ErrNoService is a Service the plan has no port of.
var ErrNoService = errors.New("no such Service")

// Explanation is the answer for one Service; -o json prints it as is. Every
// list is sorted as the plan sorts it and never null.
type Explanation struct {
	// Service is "namespace/name"; Node is the node planned for.
	Service string `json:"service"`
	Node    string `json:"node"`
	Ports   []Port `json:"ports"`
	// Guard is the node-IP guard's verdict on each ClusterIP, externalIP
	// and LoadBalancer IP of the Service.
	Guard []Verdict `json:"guard"`
	// Refusals are every refusal of the Service: the conversion's, the
	// guard's, the planner's.
	Refusals []Refusal `json:"refusals"`
	// Kernel is the comparison with the kernel; absent offline.
	Kernel *Comparison `json:"kernel,omitempty"`

	// checks are what the kernel must hold: the virtual servers the
	// Service wins, the addresses it binds, its set entries, the
	// protected addresses it names.
	checks checks
}

// Port is one service port.
type Port struct {
	// Name is the port's name, "" for a single unnamed port.
	Name     string `json:"name"`
	Protocol string `json:"protocol"`
	Port     uint16 `json:"port"`
	NodePort uint16 `json:"nodePort,omitempty"`
	// HealthCheckNodePort is the port's healthCheckNodePort, 0 for none.
	HealthCheckNodePort uint16 `json:"healthCheckNodePort,omitempty"`
	// ExternalTrafficPolicy and InternalTrafficPolicy: Cluster or Local.
	ExternalTrafficPolicy string          `json:"externalTrafficPolicy"`
	InternalTrafficPolicy string          `json:"internalTrafficPolicy"`
	VirtualServers        []VirtualServer `json:"virtualServers"`
	Endpoints             []Endpoint      `json:"endpoints"`
	// Entries are the port's set entries outside its virtual servers:
	// hairpin (KUBE-LOOP-BACK) and healthCheckNodePort.
	Entries []Entry `json:"ipsetEntries"`
}

// VirtualServer is one virtual server the port asks for.
type VirtualServer struct {
	// Kind is the field that asks for it: ClusterIP, NodePort,
	// LoadBalancerIP, ExternalIP.
	Kind string `json:"kind"`
	// Family is IPv4 or IPv6.
	Family   string `json:"family"`
	Protocol string `json:"protocol"`
	Address  string `json:"address"`
	Port     uint16 `json:"port"`
	// Scheduler, Flags (sh-fallback, mh-port, ... ; persistent) and the
	// persistence timeout in seconds (session affinity), as ipvsadm
	// names them.
	Scheduler          string   `json:"scheduler"`
	Flags              []string `json:"flags"`
	PersistenceTimeout uint32   `json:"persistenceTimeout,omitempty"`
	// Bound: its address is bound on kube-ipvs0; false for a node address
	// served at L4 (NodePorts, a local externalIP the guard keeps off
	// kube-ipvs0).
	Bound bool `json:"bound"`
	// ServedBy is the service port that has the virtual server instead
	// (DuplicateVirtualServer), "" when this port has it.
	ServedBy string `json:"servedBy,omitempty"`
	// Endpoints is the list its real servers are: cluster, local,
	// local-fallback.
	Endpoints   string       `json:"endpoints"`
	RealServers []RealServer `json:"realServers"`
	Entries     []Entry      `json:"ipsetEntries"`
}

// RealServer is one real server of a virtual server.
type RealServer struct {
	Address string `json:"address"`
	Port    uint16 `json:"port"`
	Weight  int32  `json:"weight"`
}

// Entry is one ipset member and the rules that match its set.
type Entry struct {
	Set string `json:"set"`
	// Entry is as `ipset save` prints it.
	Entry string `json:"entry"`
	// Rules name the chains whose rules match the set: "nat KUBE-SERVICES".
	Rules []string `json:"rules"`
}

// Endpoint is one endpoint of the port and each policy's choice.
type Endpoint struct {
	Address     string `json:"address"`
	Port        uint16 `json:"port"`
	Node        string `json:"node,omitempty"`
	Zone        string `json:"zone,omitempty"`
	Ready       bool   `json:"ready"`
	Serving     bool   `json:"serving"`
	Terminating bool   `json:"terminating"`
	// Cluster and Local: the Cluster and the Local traffic policy's lists.
	Cluster Choice `json:"cluster"`
	Local   Choice `json:"local"`
}

// Choice is whether a list took an endpoint, and why not.
type Choice struct {
	Chosen bool   `json:"chosen"`
	Why    string `json:"why,omitempty"`
}

// Verdict is the guard's answer for one address of the Service.
type Verdict struct {
	Address string `json:"address"`
	// Fields are the Service fields that name it.
	Fields    []string `json:"fields"`
	Protected bool     `json:"protected"`
	// Reason and Detail: why it is protected, or warned about.
	Reason string `json:"reason,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// Refusal is one refusal of the Service, as plan's "# refused" names it.
type Refusal struct {
	Field   string `json:"field"`
	Address string `json:"address"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// Build explains Service name from the node's plan.
func Build(res *nodeplan.Result, name types.NamespacedName) (*Explanation, error) {
	var ports []model.ServicePort
	for _, sp := range res.Cluster.Services {
		if sp.Name.NamespacedName == name {
			ports = append(ports, sp)
		}
	}
	share, ok := res.Plan.Share(name, ports, res.Cluster.Endpoints)
	subject := model.ServiceSubject(name)
	var refusals []model.Refusal
	for _, r := range res.State.Refusals {
		if r.Subject == subject {
			refusals = append(refusals, r)
		}
	}
	if !ok && len(refusals) == 0 {
		return nil, ErrNoService
	}
	x := &Explanation{Service: name.String(), Node: res.Options.NodeName, Ports: []Port{}, Guard: []Verdict{}, Refusals: []Refusal{}}
	x.checks.rulesets = res.Plan.Rulesets()
	chains := matchingChains(x.checks.rulesets)
	x.checks.chains = chains
	for i := range share.Ports {
		x.Ports = append(x.Ports, x.port(&share.Ports[i], chains))
	}
	for _, r := range refusals {
		x.Refusals = append(x.Refusals, Refusal{Field: r.Field, Address: r.Address, Reason: string(r.Reason), Message: r.Message})
	}
	x.guard(res.Plan, ports)
	return x, nil
}

func (x *Explanation) port(ps *planner.PortShare, chains map[string][]string) Port {
	sp := &ps.Port
	p := Port{Name: sp.Name.Port, Protocol: strings.ToUpper(string(sp.Protocol)), Port: sp.Port, NodePort: sp.NodePort,
		HealthCheckNodePort: sp.HealthCheckNodePort, ExternalTrafficPolicy: policy(sp.ExternalPolicyLocal),
		InternalTrafficPolicy: policy(sp.InternalPolicyLocal), VirtualServers: []VirtualServer{}, Endpoints: []Endpoint{}}
	for _, c := range ps.Claims {
		vs := &c.VirtualServer
		v := VirtualServer{Kind: string(c.Kind), Family: family(vs.Address), Protocol: strings.ToUpper(string(vs.Protocol)),
			Address: vs.Address.String(), Port: vs.Port, Scheduler: vs.Scheduler, Flags: flagNames(vs),
			PersistenceTimeout: vs.PersistenceTimeout, Bound: c.Bound, Endpoints: string(c.List), RealServers: []RealServer{}}
		for _, rs := range vs.RealServers {
			v.RealServers = append(v.RealServers, RealServer{Address: rs.Address.String(), Port: rs.Port, Weight: rs.Weight})
		}
		v.Entries = entries(c.Entries, chains)
		if !c.Winner.IsZero() {
			v.ServedBy = c.Winner.String() + " (" + string(c.WinnerKind) + ")"
		} else {
			x.checks.add(c)
		}
		p.VirtualServers = append(p.VirtualServers, v)
	}
	for _, c := range ps.Endpoints {
		e := &c.Endpoint
		p.Endpoints = append(p.Endpoints, Endpoint{Address: e.Address.String(), Port: e.Port, Node: e.NodeName, Zone: e.Zone,
			Ready: e.Ready, Serving: e.Serving, Terminating: e.Terminating,
			Cluster: Choice(c.Cluster), Local: Choice(c.Local)})
	}
	p.Entries = entries(ps.Entries, chains)
	x.checks.members = append(x.checks.members, ps.Entries...)
	return p
}

// guard records the guard's verdict on each address of the Service's
// ports, and the protected ones the kernel must not have bound.
func (x *Explanation) guard(plan *planner.Incremental, ports []model.ServicePort) {
	fields := map[netip.Addr][]string{}
	var addrs []netip.Addr
	note := func(as []netip.Addr, field string) {
		for _, a := range as {
			if !a.IsValid() {
				continue
			}
			if _, ok := fields[a]; !ok {
				addrs = append(addrs, a)
			}
			if !slices.Contains(fields[a], field) {
				fields[a] = append(fields[a], field)
			}
		}
	}
	for _, sp := range ports {
		note(sp.ClusterIPs, planner.FieldClusterIPs)
		note(sp.ExternalIPs, planner.FieldExternalIPs)
		note(sp.LoadBalancerIPs, planner.FieldLoadBalancer)
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	g := plan.Guard()
	for _, a := range addrs {
		v := g.Check(a)
		x.Guard = append(x.Guard, Verdict{Address: a.String(), Fields: fields[a], Protected: v.Protected, Reason: string(v.Reason), Detail: v.Detail})
		if v.Protected {
			x.checks.protected = append(x.checks.protected, a)
		}
	}
}

func policy(local bool) string {
	if local {
		return "Local"
	}
	return "Cluster"
}

func family(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// flagNames are vs's flags as ipvsadm names them: "persistent", then the
// scheduler's (-b).
func flagNames(vs *ipvs.VirtualServer) []string {
	out := []string{}
	if vs.Flags&ipvs.FlagPersistent != 0 {
		out = append(out, "persistent")
	}
	if b := ipvs.AppendSchedulerFlags(nil, vs.Scheduler, vs.Flags); len(b) > 0 {
		out = append(out, strings.Split(string(b), ",")...)
	}
	return out
}

func entries(ms []planner.SetMember, chains map[string][]string) []Entry {
	out := make([]Entry, 0, len(ms))
	for _, m := range ms {
		rules := chains[m.Set.Name]
		if rules == nil {
			rules = []string{}
		}
		out = append(out, Entry{Set: m.Set.Name, Entry: string(iptables.AppendEntry(nil, m.Set.Type, m.Entry)), Rules: rules})
	}
	return out
}

// matchingChains maps each set name to the chains whose rules match it
// ("nat KUBE-SERVICES"), in the rulesets' order.
func matchingChains(rss []iptables.Ruleset) map[string][]string {
	out := map[string][]string{}
	for _, rs := range rss {
		for _, t := range rs.Tables {
			for _, c := range t.Chains {
				for _, r := range c.Rules {
					i := slices.Index(r, "--match-set")
					if i < 0 || i+1 >= len(r) {
						continue
					}
					set, at := r[i+1], t.Name+" "+c.Name
					if !slices.Contains(out[set], at) {
						out[set] = append(out[set], at)
					}
				}
			}
		}
	}
	return out
}
