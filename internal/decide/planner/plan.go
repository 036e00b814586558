package planner

import (
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// ZoneLabel is the Node label whose value is the node's zone for topology
// hints.
const ZoneLabel = "topology.kubernetes.io/zone"

// DefaultMasqueradeBit is --masquerade-bit's default: mark 0x4000.
const DefaultMasqueradeBit = 14

// trafficDistributionPreferSameNode is spec.trafficDistribution asking for
// node-local endpoints; only then are EndpointSlice node hints used.
const trafficDistributionPreferSameNode = "PreferSameNode"

// Refusal field names for the addresses the planner checks.
const (
	FieldClusterIPs    = "spec.clusterIPs"
	FieldNodePort      = "spec.ports.nodePort"
	FieldLoadBalancer  = "status.loadBalancer.ingress"
	FieldExternalIPs   = "spec.externalIPs"
	FieldScheduler     = "metadata.annotations[ipvs-proxy.io/scheduler]"
	FieldSchedulerFlag = "--ipvs-scheduler"
	FieldSchedFlags    = "metadata.annotations[ipvs-proxy.io/scheduler-flags]"
	FieldProtocol      = "spec.ports.protocol"
	FieldPort          = "spec.ports.port"
)

// vipKind is which field of a service asked for a virtual server. Its order
// is the priority when two services claim one protocol, address and port.
type vipKind uint8

const (
	kindClusterIP vipKind = iota
	kindNodePort
	kindLoadBalancer
	kindExternalIP
)

// addressKind is k as the model names it.
func (k vipKind) addressKind() model.AddressKind {
	switch k {
	case kindClusterIP:
		return model.KindClusterIP
	case kindNodePort:
		return model.KindNodePort
	case kindLoadBalancer:
		return model.KindLoadBalancer
	}
	return model.KindExternalIP
}

func (k vipKind) field() string {
	switch k {
	case kindClusterIP:
		return FieldClusterIPs
	case kindNodePort:
		return FieldNodePort
	case kindLoadBalancer:
		return FieldLoadBalancer
	}
	return FieldExternalIPs
}

// env is what planning every service port shares: the options and what the
// nodes imply (the guard, this node's zone, the NodePort addresses, the
// families planned, the rulesets). It is built once per (options, nodes)
// and never changed.
type env struct {
	o        Options
	sched    string
	guard    *guard.Guard
	families [2]bool
	npAddrs  []netip.Addr
	// npRestricted: --nodeport-addresses restricts npAddrs.
	npRestricted bool
	zone         string
	rulesets     []iptables.Ruleset
	// sets are the state's IPSets in name order: family and SetSpecs index.
	sets []setRef
}

type setRef struct{ fam, spec uint8 }

// setIndex maps an iptables.SetSpecs name to its index.
var setIndex = func() map[string]uint8 {
	m := make(map[string]uint8, len(iptables.SetSpecs))
	for i, s := range iptables.SetSpecs {
		m[s.Name] = uint8(i)
	}
	return m
}()

// Plan computes the desired state of this node from the cluster model and
// the options. It is pure and deterministic: every slice of the result is
// sorted and the same input gives the same State. Nothing in c or o is
// modified. It never panics on any input; what it cannot plan becomes a
// Refusal. State.Refusals holds c.Refusals too, merged, sorted and without
// duplicates. Plan is an Incremental fed every service at once.
func Plan(c model.Cluster, o Options) State { return PlanAll(c, o).State() }

// PlanAll is Plan before its State: an Incremental fed every service of
// c at once, for one Service's share of the plan (Incremental.Service).
func PlanAll(c model.Cluster, o Options) *Incremental {
	inc := NewIncremental(o, c.Nodes, c.Refusals)
	byService := make(map[types.NamespacedName][]*model.ServicePort, len(c.Services))
	keys := make([]types.NamespacedName, 0, len(c.Services))
	for i := range c.Services {
		k := c.Services[i].Name.NamespacedName
		if _, ok := byService[k]; !ok {
			keys = append(keys, k)
		}
		byService[k] = append(byService[k], &c.Services[i])
	}
	for _, k := range keys {
		inc.update(k, byService[k], c.Endpoints, nil)
	}
	return inc
}

func newEnv(o Options, nodes []model.Node) *env {
	e := &env{o: o, sched: o.Scheduler}
	if e.sched == "" {
		e.sched = ipvs.DefaultScheduler
	}
	e.guard = guard.New(GuardInputs(&o, nodes))
	var self *model.Node
	for i := range nodes {
		if n := &nodes[i]; n.Name == o.NodeName && o.NodeName != "" {
			self = n
			e.zone = n.Labels[ZoneLabel]
			break
		}
	}
	var local [2]bool
	for _, a := range o.LocalAddrs {
		if serviceAddr(a) {
			local[famOf(a)] = true
		}
	}
	npCIDRs, npRestricted := nodePortCIDRs(&o, self)
	e.npRestricted = npRestricted
	for _, a := range o.LocalAddrs {
		if !a.IsValid() || a.Is4In6() {
			continue
		}
		a = a.WithZone("")
		if !npRestricted {
			if !serviceAddr(a) {
				continue
			}
		} else if !containsAny(npCIDRs, a) {
			continue
		}
		e.npAddrs = append(e.npAddrs, a)
		local[famOf(a)] = true
	}
	e.families = planFamilies(local, self, &o)
	e.npAddrs = slices.DeleteFunc(e.npAddrs, func(a netip.Addr) bool { return !e.families[famOf(a)] })
	slices.SortFunc(e.npAddrs, netip.Addr.Compare)
	e.npAddrs = slices.Compact(e.npAddrs)
	var names []string
	for f := range e.families {
		if !e.families[f] {
			continue
		}
		fam := familyNames[f]
		for si, spec := range iptables.SetSpecs {
			e.sets = append(e.sets, setRef{fam: uint8(f), spec: uint8(si)})
			names = append(names, iptables.SetName(spec.Name, fam))
		}
		cfg := rulesConfig(&o, f, e.npAddrs, npRestricted)
		cfg.NodePodCIDR = nodePodCIDR(self, f)
		e.rulesets = append(e.rulesets, iptables.Rules(cfg))
	}
	order := make([]int, len(e.sets))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(names[a], names[b]) })
	sorted := make([]setRef, len(order))
	for i, j := range order {
		sorted[i] = e.sets[j]
	}
	e.sets = sorted
	return e
}

// rulesConfig is what family f's iptables rules depend on: the masquerade
// bit and mode, the family's cluster CIDR, and the NodePort addresses when
// --nodeport-addresses restricts them.
func rulesConfig(o *Options, f int, npAddrs []netip.Addr, npRestricted bool) iptables.RulesConfig {
	cfg := iptables.RulesConfig{Family: familyNames[f], MasqueradeBit: o.MasqueradeBit, MasqueradeAll: o.MasqueradeAll}
	if cfg.MasqueradeBit < 0 || cfg.MasqueradeBit > 31 {
		cfg.MasqueradeBit = DefaultMasqueradeBit
	}
	for _, cidr := range o.ClusterCIDRs {
		if cidr.IsValid() && famOf(cidr.Addr()) == f && !cidr.Addr().Is4In6() {
			cfg.ClusterCIDR = cidr.Masked()
			break
		}
	}
	if npRestricted {
		cfg.NodePortAddrs = []netip.Addr{}
		for _, a := range npAddrs {
			if famOf(a) == f {
				cfg.NodePortAddrs = append(cfg.NodePortAddrs, a)
			}
		}
	}
	return cfg
}

// nodePodCIDR is this node's pod CIDR of family f (its Node's
// spec.podCIDRs), or the zero prefix when the Node is unknown or has none:
// then no pod counts as this node's for the Local policy's fallback
// (iptables.RulesConfig.NodePodCIDR).
func nodePodCIDR(self *model.Node, f int) netip.Prefix {
	if self == nil {
		return netip.Prefix{}
	}
	for _, p := range self.PodCIDRs {
		if p.IsValid() && !p.Addr().Is4In6() && famOf(p.Addr()) == f {
			return p.Masked()
		}
	}
	return netip.Prefix{}
}

func containsAny(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.IsValid() && p.Contains(a) {
			return true
		}
	}
	return false
}
