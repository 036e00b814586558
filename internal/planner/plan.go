package planner

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/ipvs-proxy/ipvs-proxy/internal/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/model"
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

// famEndpoints are one service port's endpoints of one family, categorised.
type famEndpoints struct {
	done bool
	// cluster serves Cluster traffic policy, local serves Local policy.
	cluster, local []ipvs.RealServer
	// loop are the endpoints on this node among cluster and local: hairpin.
	loop []ipvs.RealServer
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
	zone     string
	rulesets []iptables.Ruleset
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
func Plan(c model.Cluster, o Options) State {
	inc := NewIncremental(o, c.Nodes, c.Refusals)
	byService := make(map[string][]*model.ServicePort, len(c.Services))
	keys := make([]string, 0, len(c.Services))
	for i := range c.Services {
		k := c.Services[i].Name.ServiceKey()
		if _, ok := byService[k]; !ok {
			keys = append(keys, k)
		}
		byService[k] = append(byService[k], &c.Services[i])
	}
	for _, k := range keys {
		inc.update(k, byService[k], c.Endpoints, nil)
	}
	return inc.State()
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
		cfg := iptables.RulesConfig{Family: fam, MasqueradeBit: o.MasqueradeBit, MasqueradeAll: o.MasqueradeAll}
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
			for _, a := range e.npAddrs {
				if famOf(a) == f {
					cfg.NodePortAddrs = append(cfg.NodePortAddrs, a)
				}
			}
		}
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

func containsAny(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.IsValid() && p.Contains(a) {
			return true
		}
	}
	return false
}

// claim is one virtual server a service port asks for, built as it is
// programmed if the port wins it (see resolve).
type claim struct {
	port *portPlan
	kind vipKind
	bind bool
	vs   ipvs.VirtualServer
	// entries are the ipset entries the claim puts in the state while it
	// wins, KUBE-IPVS-IPS's included when it binds.
	entries []setEntry
}

// setEntry is an entry of the set SetSpecs[spec] of family fam.
type setEntry struct {
	fam, spec uint8
	e         iptables.Entry
}

// portPlan is one service port's share of the state, whatever other
// services ask for.
type portPlan struct {
	name model.ServicePortName
	// label is "namespace/name:port", the Service of its virtual servers.
	label string
	// index is the port's position among its service's ports: the last
	// tie-break between two claims of equal kind and name.
	index    int
	claims   []*claim
	refusals []model.Refusal
	// loop are the hairpin entries (KUBE-LOOP-BACK) of each family, in the
	// state while the port wins a virtual server of that family; wins
	// counts those.
	loop [2][]setEntry
	wins [2]int
}

// portPlanner plans one service port against the env.
type portPlanner struct {
	e   *env
	sp  *model.ServicePort
	eps []model.Endpoint
	fam [2]famEndpoints
	out *portPlan
}

// planPort plans service port sp with its endpoints; index is its position
// among its service's ports.
func (e *env) planPort(sp *model.ServicePort, eps []model.Endpoint, index int) *portPlan {
	n := &sp.Name
	label := n.Namespace + "/" + n.Name
	if n.Port != "" {
		label += ":" + n.Port
	}
	p := &portPlanner{e: e, sp: sp, eps: eps, out: &portPlan{name: sp.Name, label: label, index: index}}
	p.service()
	for f := range p.fam {
		for _, rs := range p.fam[f].loop {
			p.out.loop[f] = p.add(p.out.loop[f], f, iptables.SetLoopBack,
				iptables.Entry{IP: rs.Address, Protocol: sp.Protocol, Port: rs.Port, Net: iptables.HostPrefix(rs.Address)})
		}
	}
	return p.out
}

func (p *portPlanner) refuse(field, addr string, r model.Reason, msg string) {
	p.out.refusals = append(p.out.refusals, model.Refusal{
		Service: p.sp.Name.ServiceKey(),
		Field:   field,
		Address: addr,
		Reason:  r,
		Message: msg,
	})
}

// service collects the claims of the service port.
func (p *portPlanner) service() {
	sp := p.sp
	sched := sp.Scheduler
	if sched == "" {
		sched = p.e.sched
	}
	if !ipvs.KnownScheduler(sched) {
		field := FieldScheduler
		if sp.Scheduler == "" {
			field = FieldSchedulerFlag
		}
		p.refuse(field, sched, model.ReasonUnknownScheduler,
			"not an IPVS scheduler this kernel ships ("+strings.Join(ipvs.Schedulers, " ")+"); port "+portLabel(sp)+" not planned")
		return
	}
	switch sp.Protocol {
	case model.TCP, model.UDP, model.SCTP:
	default:
		p.refuse(FieldProtocol, string(sp.Protocol), model.ReasonInvalidProtocol, "IPVS serves TCP, UDP and SCTP only; port "+portLabel(sp)+" not planned")
		return
	}
	if sp.Port == 0 {
		p.refuse(FieldPort, "0", model.ReasonInvalidPort, "port 0; port "+portLabel(sp)+" not planned")
		return
	}
	for _, a := range sp.ClusterIPs {
		p.vip(a, sp.Port, kindClusterIP)
	}
	if sp.NodePort != 0 {
		// NodePorts are served in the families the service has cluster IPs
		// in (spec.ipFamilies), as kube-proxy's per-family proxiers do.
		var svcFam [2]bool
		for _, a := range sp.ClusterIPs {
			if a.IsValid() {
				svcFam[famOf(a)] = true
			}
		}
		if !svcFam[0] && !svcFam[1] {
			svcFam = [2]bool{true, true}
		}
		for _, a := range p.e.npAddrs {
			if !svcFam[famOf(a)] {
				continue
			}
			if containsAny(p.e.o.ExcludeCIDRs, a) {
				p.refuse(FieldNodePort, a.String(), model.ReasonExcludedCIDR,
					"node address inside --ipvs-exclude-cidrs; no NodePort virtual server on it")
				continue
			}
			if v := p.e.guard.CheckPort(sp.Protocol, a, sp.NodePort); v.Protected {
				p.refuse(FieldNodePort, a.String(), v.Reason, v.Detail+"; no NodePort virtual server on it")
				continue
			}
			p.claim(ipvs.Key{Protocol: sp.Protocol, Address: a, Port: sp.NodePort}, kindNodePort, false)
		}
	}
	for _, a := range sp.ExternalIPs {
		p.vip(a, sp.Port, kindExternalIP)
	}
	for _, a := range sp.LoadBalancerIPs {
		p.vip(a, sp.Port, kindLoadBalancer)
	}
}

// portLabel names the port in a message: its name Go-quoted (an API
// value), or "PORT/PROTOCOL" when it has none.
func portLabel(sp *model.ServicePort) string {
	if sp.Name.Port == "" {
		return strconv.Itoa(int(sp.Port)) + "/" + model.Word(string(sp.Protocol))
	}
	return strconv.Quote(sp.Name.Port)
}

// vip checks one service address against the guard and the options and
// records its claim, or a refusal, or both.
func (p *portPlanner) vip(a netip.Addr, port uint16, kind vipKind) {
	field := kind.field()
	if !a.IsValid() {
		p.refuse(field, a.String(), model.ReasonInvalidAddress, "not an IP address; not planned")
		return
	}
	a = a.WithZone("")
	if !a.Is4In6() && !p.e.families[famOf(a)] {
		fam := "IPv4"
		if a.Is6() {
			fam = "IPv6"
		}
		p.refuse(field, a.String(), model.ReasonUnsupportedFamily, "this node has no "+fam+" address; not planned")
		return
	}
	if containsAny(p.e.o.ExcludeCIDRs, a) {
		p.refuse(field, a.String(), model.ReasonExcludedCIDR, "inside --ipvs-exclude-cidrs; no virtual server, no binding, no rule")
		return
	}
	key := ipvs.Key{Protocol: p.sp.Protocol, Address: a, Port: port}
	v := p.e.guard.Check(a)
	if !v.Protected {
		if v.Warn {
			p.refuse(field, a.String(), v.Reason, v.Detail+"; bound all the same (--ipvs-strict-arp stops it)")
		}
		p.claim(key, kind, true)
		return
	}
	external := kind == kindExternalIP || kind == kindLoadBalancer
	switch {
	case v.NeverVIP:
		p.refuse(field, a.String(), v.Reason, v.Detail+"; no virtual server, no binding, no rule")
	case external && p.e.o.RefuseNodeExternalIPs && (v.Node != "" || v.Local):
		p.refuse(field, a.String(), v.Reason, v.Detail+"; refused outright (--refuse-node-external-ips): no virtual server, no binding, no rule")
	case v.Local:
		if pv := p.e.guard.CheckPort(p.sp.Protocol, a, port); pv.Protected {
			p.refuse(field, a.String(), pv.Reason, v.Detail+"; not bound on kube-ipvs0, and not served at L4 either: "+pv.Detail)
			return
		}
		p.refuse(field, a.String(), v.Reason, v.Detail+"; not bound on kube-ipvs0, served at L4 because it is a local address of this node")
		p.claim(key, kind, false)
	default:
		p.refuse(field, a.String(), v.Reason, v.Detail+"; not bound on kube-ipvs0 and not served by this node")
	}
}

func compareNames(a, b *model.ServicePortName) int {
	if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	if c := strings.Compare(a.Name, b.Name); c != 0 {
		return c
	}
	return strings.Compare(a.Port, b.Port)
}

// SortRefusals sorts refusals by service, field, address, reason and
// message, and drops duplicates, in place.
func SortRefusals(rs []model.Refusal) []model.Refusal {
	slices.SortFunc(rs, compareRefusals)
	return slices.Compact(rs)
}

func compareRefusals(a, b model.Refusal) int {
	if c := strings.Compare(a.Service, b.Service); c != 0 {
		return c
	}
	if c := strings.Compare(a.Field, b.Field); c != 0 {
		return c
	}
	if c := strings.Compare(a.Address, b.Address); c != 0 {
		return c
	}
	if c := strings.Compare(string(a.Reason), string(b.Reason)); c != 0 {
		return c
	}
	return strings.Compare(a.Message, b.Message)
}

func ipvsAddrPort(k ipvs.Key) string { return string(ipvs.AppendAddrPort(nil, k.Address, k.Port)) }

// add appends entry e of set (a SetSpecs name) of family f to es; a
// family the node does not plan gets nothing (never reached: its addresses
// are refused before they are claimed).
func (p *portPlanner) add(es []setEntry, f int, set string, e iptables.Entry) []setEntry {
	if !p.e.families[f] {
		return es
	}
	return append(es, setEntry{fam: uint8(f), spec: setIndex[set], e: e})
}

// claim records the port's claim on key: the virtual server it gets if it
// wins, the address it binds and the ipset entries it adds.
func (p *portPlanner) claim(key ipvs.Key, kind vipKind, bind bool) {
	sp := p.sp
	f := famOf(key.Address)
	sched := sp.Scheduler
	if sched == "" {
		sched = p.e.sched
	}
	c := &claim{port: p.out, kind: kind, bind: bind,
		vs: ipvs.VirtualServer{Key: key, Scheduler: sched, Flags: ipvs.SchedulerFlags(sched), Service: p.out.label}}
	if sp.AffinityTimeout > 0 {
		c.vs.Flags |= ipvs.FlagPersistent
		c.vs.PersistenceTimeout = sp.AffinityTimeout
	}
	fe := p.endpoints(f)
	local := sp.ExternalPolicyLocal
	if kind == kindClusterIP {
		local = sp.InternalPolicyLocal
	}
	src := fe.cluster
	if local {
		src = fe.local
	}
	c.vs.RealServers = slices.Clone(src)
	p.out.claims = append(p.out.claims, c)

	var es []setEntry
	if bind {
		es = p.add(es, f, iptables.SetIPVSIPs, iptables.Entry{IP: key.Address})
	}
	e := iptables.Entry{IP: key.Address, Protocol: sp.Protocol, Port: key.Port}
	switch kind {
	case kindClusterIP:
		es = p.add(es, f, iptables.SetClusterIP, e)
	case kindExternalIP:
		if sp.ExternalPolicyLocal {
			es = p.add(es, f, iptables.SetExternalIPLocal, e)
		} else {
			es = p.add(es, f, iptables.SetExternalIP, e)
		}
	case kindLoadBalancer:
		es = p.add(es, f, iptables.SetLoadBalancer, e)
		if sp.ExternalPolicyLocal {
			es = p.add(es, f, iptables.SetLoadBalancerLocal, e)
		}
		es = p.firewall(es, f, e)
	case kindNodePort:
		np := iptables.Entry{Port: key.Port}
		switch sp.Protocol {
		case model.TCP:
			es = p.add(es, f, iptables.SetNodePortTCP, np)
			if sp.ExternalPolicyLocal {
				es = p.add(es, f, iptables.SetNodePortLocalTCP, np)
			}
		case model.UDP:
			es = p.add(es, f, iptables.SetNodePortUDP, np)
			if sp.ExternalPolicyLocal {
				es = p.add(es, f, iptables.SetNodePortLocalUDP, np)
			}
		case model.SCTP:
			es = p.add(es, f, iptables.SetNodePortSCTP, e)
			if sp.ExternalPolicyLocal {
				es = p.add(es, f, iptables.SetNodePortLocalSCTP, e)
			}
		}
	}
	// As kube-proxy's: the healthCheckNodePort of every service port this
	// node handles in the family, whatever its virtual servers (a
	// LoadBalancer without node ports or ingress yet, ipMode Proxy, refused
	// external addresses), through any claim of the port (the set counts).
	if sp.HealthCheckNodePort != 0 {
		es = p.add(es, f, iptables.SetHealthCheckNodePort, iptables.Entry{Port: sp.HealthCheckNodePort})
	}
	c.entries = es
}

// endpoints categorises the port's endpoints of family f as
// kube-proxy's CategorizeEndpoints does: Cluster policy uses the ready
// endpoints (narrowed by topology hints when they apply), or if none is
// ready the serving and terminating ones; Local policy uses this node's
// ready endpoints, or if none, this node's serving and terminating ones.
// Non-serving endpoints are never used.
func (p *portPlanner) endpoints(f int) *famEndpoints {
	fe := &p.fam[f]
	if fe.done {
		return fe
	}
	fe.done = true
	sp := p.sp
	eps := p.eps
	node := p.e.o.NodeName
	ok := func(e *model.Endpoint) bool {
		if !e.Address.IsValid() || e.Port == 0 || e.Address.Is4In6() {
			return false
		}
		return famOf(e.Address) == f
	}
	isLocal := func(e *model.Endpoint) bool { return node != "" && e.NodeName == node }

	// Topology: hints apply when every ready endpoint carries them and some
	// are for this node (PreferSameNode) or this node's zone.
	const (
		topoNone = iota
		topoNode
		topoZone
	)
	allZone, hasZone, allNode, hasNode, anyReady := true, false, true, false, false
	localReady, localST := false, false
	for j := range eps {
		e := &eps[j]
		if !ok(e) {
			continue
		}
		if e.Ready {
			anyReady = true
			if isLocal(e) {
				localReady = true
			}
			if len(e.ZoneHints) == 0 {
				allZone = false
			} else if p.e.zone != "" && slices.Contains(e.ZoneHints, p.e.zone) {
				hasZone = true
			}
			if len(e.NodeHints) == 0 {
				allNode = false
			} else if node != "" && slices.Contains(e.NodeHints, node) {
				hasNode = true
			}
		} else if e.Serving && e.Terminating && isLocal(e) {
			localST = true
		}
	}
	mode := topoNone
	if anyReady {
		switch {
		case sp.TrafficDistribution == trafficDistributionPreferSameNode && allNode && hasNode:
			mode = topoNode
		case allZone && hasZone:
			mode = topoZone
		}
	}
	avail := func(e *model.Endpoint) bool {
		switch mode {
		case topoNode:
			return slices.Contains(e.NodeHints, node)
		case topoZone:
			return slices.Contains(e.ZoneHints, p.e.zone)
		}
		return true
	}
	rs := func(e *model.Endpoint) ipvs.RealServer {
		return ipvs.RealServer{Address: e.Address.WithZone(""), Port: e.Port, Weight: ipvs.DefaultWeight}
	}
	fe.cluster = make([]ipvs.RealServer, 0, len(eps))
	for j := range eps {
		e := &eps[j]
		if ok(e) && e.Ready && avail(e) {
			fe.cluster = append(fe.cluster, rs(e))
			if isLocal(e) {
				fe.loop = append(fe.loop, rs(e))
			}
		}
	}
	if len(fe.cluster) == 0 {
		for j := range eps {
			e := &eps[j]
			if ok(e) && !e.Ready && e.Serving && e.Terminating && avail(e) {
				fe.cluster = append(fe.cluster, rs(e))
				if isLocal(e) {
					fe.loop = append(fe.loop, rs(e))
				}
			}
		}
	}
	if localReady || localST {
		for j := range eps {
			e := &eps[j]
			if !ok(e) || !isLocal(e) {
				continue
			}
			if localReady && e.Ready || !localReady && !e.Ready && e.Serving && e.Terminating {
				fe.local = append(fe.local, rs(e))
				fe.loop = append(fe.loop, rs(e))
			}
		}
	}
	fe.cluster = sortRS(fe.cluster)
	fe.local = sortRS(fe.local)
	fe.loop = sortRS(fe.loop)
	return fe
}

func sortRS(rs []ipvs.RealServer) []ipvs.RealServer {
	slices.SortFunc(rs, ipvs.CompareRealServers)
	return slices.CompactFunc(rs, func(a, b ipvs.RealServer) bool { return ipvs.CompareRealServers(a, b) == 0 })
}
