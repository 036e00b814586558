package planner

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
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

// candidate is one virtual server some service port asks for.
type candidate struct {
	key  ipvs.Key
	svc  int32
	kind vipKind
	bind bool
}

// famEndpoints are one service port's endpoints of one family, categorised.
type famEndpoints struct {
	done bool
	used bool
	// cluster serves Cluster traffic policy, local serves Local policy.
	cluster, local []ipvs.RealServer
	// loop are the endpoints on this node among cluster and local: hairpin.
	loop []ipvs.RealServer
}

type svcState struct {
	name string
	fam  [2]famEndpoints
}

type planner struct {
	c        *model.Cluster
	o        *Options
	sched    string
	guard    *addrmgr.Guard
	families [2]bool
	npAddrs  []netip.Addr
	zone     string
	svcs     []svcState
	cands    []candidate
	refusals []model.Refusal
	bound    []netip.Addr
	sets     [2][][]iptables.Entry
	setIdx   map[string]int
}

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

// Plan computes the desired state of this node from the cluster model and
// the options. It is pure and deterministic: every slice of the result is
// sorted and the same input gives the same State. Nothing in c or o is
// modified. It never panics on any input; what it cannot plan becomes a
// Refusal. State.Refusals holds c.Refusals too, merged, sorted and without
// duplicates.
func Plan(c model.Cluster, o Options) State {
	p := &planner{c: &c, o: &o}
	p.init()
	for i := range c.Services {
		p.service(i)
	}
	return p.finish()
}

func (p *planner) init() {
	o := p.o
	p.sched = o.Scheduler
	if p.sched == "" {
		p.sched = ipvs.DefaultScheduler
	}
	p.guard = addrmgr.NewGuard(addrmgr.GuardConfig{
		LocalAddrs:     o.LocalAddrs,
		LocalPrefixes:  o.LocalPrefixes,
		NodeAddrs:      addrmgr.NodeAddresses(p.c.Nodes),
		APIServers:     o.APIServerAddrs,
		Gateways:       o.Gateways,
		ProtectedCIDRs: o.ProtectedCIDRs,
		PodCIDRs:       o.ClusterCIDRs,
	})
	for _, a := range o.LocalAddrs {
		if serviceAddr(a) {
			p.families[famOf(a)] = true
		}
	}
	for _, a := range o.LocalAddrs {
		if !a.IsValid() || a.Is4In6() {
			continue
		}
		a = a.WithZone("")
		if len(o.NodePortAddresses) == 0 {
			if !serviceAddr(a) {
				continue
			}
		} else if !containsAny(o.NodePortAddresses, a) {
			continue
		}
		p.npAddrs = append(p.npAddrs, a)
		p.families[famOf(a)] = true
	}
	slices.SortFunc(p.npAddrs, netip.Addr.Compare)
	p.npAddrs = slices.Compact(p.npAddrs)
	for i := range p.c.Nodes {
		if n := &p.c.Nodes[i]; n.Name == o.NodeName && o.NodeName != "" {
			p.zone = n.Labels[ZoneLabel]
			break
		}
	}
	p.svcs = make([]svcState, len(p.c.Services))
	p.cands = make([]candidate, 0, len(p.c.Services)*(1+len(p.npAddrs)))
	p.refusals = append(make([]model.Refusal, 0, len(p.c.Refusals)+16), p.c.Refusals...)
	p.setIdx = make(map[string]int, len(iptables.SetSpecs))
	for i, s := range iptables.SetSpecs {
		p.setIdx[s.Name] = i
	}
	for f := range p.sets {
		if p.families[f] {
			p.sets[f] = make([][]iptables.Entry, len(iptables.SetSpecs))
		}
	}
}

func containsAny(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.IsValid() && p.Contains(a) {
			return true
		}
	}
	return false
}

func (p *planner) refuse(i int, field, addr string, r model.Reason, msg string) {
	p.refusals = append(p.refusals, model.Refusal{
		Service: p.c.Services[i].Name.ServiceKey(),
		Field:   field,
		Address: addr,
		Reason:  r,
		Message: msg,
	})
}

// service collects the candidate virtual servers of service port i.
func (p *planner) service(i int) {
	sp := &p.c.Services[i]
	sched := sp.Scheduler
	if sched == "" {
		sched = p.sched
	}
	if !ipvs.KnownScheduler(sched) {
		field := FieldScheduler
		if sp.Scheduler == "" {
			field = FieldSchedulerFlag
		}
		p.refuse(i, field, sched, model.ReasonUnknownScheduler,
			"not an IPVS scheduler this kernel ships ("+strings.Join(ipvs.Schedulers, " ")+"); port "+portLabel(sp)+" not planned")
		return
	}
	switch sp.Protocol {
	case model.TCP, model.UDP, model.SCTP:
	default:
		p.refuse(i, FieldProtocol, string(sp.Protocol), model.ReasonInvalidProtocol, "IPVS serves TCP, UDP and SCTP only; port "+portLabel(sp)+" not planned")
		return
	}
	if sp.Port == 0 {
		p.refuse(i, FieldPort, "0", model.ReasonInvalidPort, "port 0; port "+portLabel(sp)+" not planned")
		return
	}
	for _, a := range sp.ClusterIPs {
		p.vip(i, a, sp.Port, kindClusterIP)
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
		for _, a := range p.npAddrs {
			if !svcFam[famOf(a)] {
				continue
			}
			if containsAny(p.o.ExcludeCIDRs, a) {
				p.refuse(i, FieldNodePort, a.String(), model.ReasonExcludedCIDR,
					"node address inside --ipvs-exclude-cidrs; no NodePort virtual server on it")
				continue
			}
			p.cands = append(p.cands, candidate{key: ipvs.Key{Protocol: sp.Protocol, Address: a, Port: sp.NodePort}, svc: int32(i), kind: kindNodePort})
		}
	}
	for _, a := range sp.ExternalIPs {
		p.vip(i, a, sp.Port, kindExternalIP)
	}
	for _, a := range sp.LoadBalancerIPs {
		p.vip(i, a, sp.Port, kindLoadBalancer)
	}
}

func portLabel(sp *model.ServicePort) string {
	if sp.Name.Port == "" {
		return strconv.Itoa(int(sp.Port)) + "/" + string(sp.Protocol)
	}
	return sp.Name.Port
}

// vip checks one service address against the guard and the options and
// records its candidate virtual server, or a refusal, or both.
func (p *planner) vip(i int, a netip.Addr, port uint16, kind vipKind) {
	field := kind.field()
	if !a.IsValid() {
		p.refuse(i, field, a.String(), model.ReasonInvalidAddress, "not an IP address; not planned")
		return
	}
	a = a.WithZone("")
	if !a.Is4In6() && !p.families[famOf(a)] {
		fam := "IPv4"
		if a.Is6() {
			fam = "IPv6"
		}
		p.refuse(i, field, a.String(), model.ReasonUnsupportedFamily, "this node has no "+fam+" address; not planned")
		return
	}
	if containsAny(p.o.ExcludeCIDRs, a) {
		p.refuse(i, field, a.String(), model.ReasonExcludedCIDR, "inside --ipvs-exclude-cidrs; no virtual server, no binding, no rule")
		return
	}
	reason, detail, allowed := p.guard.Check(a)
	if allowed {
		p.cands = append(p.cands, candidate{key: ipvs.Key{Protocol: p.c.Services[i].Protocol, Address: a, Port: port}, svc: int32(i), kind: kind, bind: true})
		return
	}
	external := kind == kindExternalIP || kind == kindLoadBalancer
	_, isNode := p.guard.IsNodeAddress(a)
	local := p.guard.IsLocal(a)
	switch {
	case addrmgr.NeverVIP(reason):
		p.refuse(i, field, a.String(), reason, detail+"; no virtual server, no binding, no rule")
	case external && p.o.RefuseNodeExternalIPs && (isNode || local):
		p.refuse(i, field, a.String(), reason, detail+"; refused outright (--refuse-node-external-ips): no virtual server, no binding, no rule")
	case local:
		p.refuse(i, field, a.String(), reason, detail+"; not bound on kube-ipvs0, served at L4 because it is a local address of this node")
		p.cands = append(p.cands, candidate{key: ipvs.Key{Protocol: p.c.Services[i].Protocol, Address: a, Port: port}, svc: int32(i), kind: kind})
	default:
		p.refuse(i, field, a.String(), reason, detail+"; not bound on kube-ipvs0 and not served by this node")
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

func (p *planner) compareCands(a, b candidate) int {
	if c := ipvs.CompareKeys(a.key, b.key); c != 0 {
		return c
	}
	if a.kind != b.kind {
		return int(a.kind) - int(b.kind)
	}
	if a.svc == b.svc {
		return 0
	}
	if c := compareNames(&p.c.Services[a.svc].Name, &p.c.Services[b.svc].Name); c != 0 {
		return c
	}
	return int(a.svc) - int(b.svc)
}

func (p *planner) finish() State {
	slices.SortFunc(p.cands, p.compareCands)
	vss := make([]ipvs.VirtualServer, 0, len(p.cands))
	for j := 0; j < len(p.cands); {
		win := p.cands[j]
		k := j + 1
		for ; k < len(p.cands) && p.cands[k].key == win.key; k++ {
			lose := p.cands[k]
			if lose.svc == win.svc {
				continue
			}
			p.refuse(int(lose.svc), lose.kind.field(), lose.key.Address.String(), model.ReasonDuplicateVirtual,
				string(lose.key.Protocol)+" "+ipvsAddrPort(lose.key)+" is already served by "+p.svcName(int(win.svc))+" ("+win.kind.field()+
					"); a ClusterIP wins over a NodePort, a LoadBalancer IP and an externalIP, then the first service by name")
		}
		j = k
		vss = append(vss, p.virtualServer(win))
	}

	st := State{VirtualServers: vss}
	// kube-ipvs0 addresses and KUBE-IPVS-IPS.
	slices.SortFunc(p.bound, netip.Addr.Compare)
	p.bound = slices.Compact(p.bound)
	st.Addresses = make([]netip.Prefix, len(p.bound))
	for i, a := range p.bound {
		st.Addresses[i] = iptables.HostPrefix(a)
		p.add(famOf(a), iptables.SetIPVSIPs, iptables.Entry{IP: a})
	}
	// Loopback entries of every service port family in use.
	for i := range p.svcs {
		for f := range p.svcs[i].fam {
			fe := &p.svcs[i].fam[f]
			if !fe.used {
				continue
			}
			proto := p.c.Services[i].Protocol
			for _, rs := range fe.loop {
				p.add(f, iptables.SetLoopBack, iptables.Entry{IP: rs.Address, Protocol: proto, Port: rs.Port, Net: iptables.HostPrefix(rs.Address)})
			}
		}
	}
	for f := range p.families {
		if !p.families[f] {
			continue
		}
		fam := familyNames[f]
		sets := make([]iptables.IPSet, len(iptables.SetSpecs))
		for si, spec := range iptables.SetSpecs {
			sets[si] = iptables.IPSet{Name: iptables.SetName(spec.Name, fam), Type: spec.Type, Family: fam, Comment: spec.Comment,
				Entries: iptables.SortEntries(p.sets[f][si])}
		}
		st.IPSets = append(st.IPSets, sets...)
		cfg := iptables.RulesConfig{Family: fam, MasqueradeBit: p.o.MasqueradeBit, MasqueradeAll: p.o.MasqueradeAll}
		if cfg.MasqueradeBit < 0 || cfg.MasqueradeBit > 31 {
			cfg.MasqueradeBit = DefaultMasqueradeBit
		}
		for _, cidr := range p.o.ClusterCIDRs {
			if cidr.IsValid() && famOf(cidr.Addr()) == f && !cidr.Addr().Is4In6() {
				cfg.ClusterCIDR = cidr.Masked()
				break
			}
		}
		if len(p.o.NodePortAddresses) > 0 {
			cfg.NodePortAddrs = []netip.Addr{}
			for _, a := range p.npAddrs {
				if famOf(a) == f {
					cfg.NodePortAddrs = append(cfg.NodePortAddrs, a)
				}
			}
		}
		st.Rulesets = append(st.Rulesets, iptables.Rules(cfg))
	}
	slices.SortFunc(st.IPSets, func(a, b iptables.IPSet) int { return strings.Compare(a.Name, b.Name) })
	st.Refusals = SortRefusals(p.refusals)
	return st
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

// svcName is "namespace/name:port" without fmt, cached per service port.
func (p *planner) svcName(i int) string {
	s := &p.svcs[i]
	if s.name == "" {
		n := &p.c.Services[i].Name
		if n.Port == "" {
			s.name = n.Namespace + "/" + n.Name
		} else {
			s.name = n.Namespace + "/" + n.Name + ":" + n.Port
		}
	}
	return s.name
}

func (p *planner) add(f int, set string, e iptables.Entry) {
	if p.sets[f] == nil {
		return // a family the node does not plan; never reached
	}
	si := p.setIdx[set]
	p.sets[f][si] = append(p.sets[f][si], e)
}

// virtualServer builds the winner's virtual server and records its address
// binding and ipset entries.
func (p *planner) virtualServer(cd candidate) ipvs.VirtualServer {
	i := int(cd.svc)
	sp := &p.c.Services[i]
	f := famOf(cd.key.Address)
	sched := sp.Scheduler
	if sched == "" {
		sched = p.sched
	}
	vs := ipvs.VirtualServer{Key: cd.key, Scheduler: sched, Flags: ipvs.SchedulerFlags(sched), Service: p.svcName(i)}
	if sp.AffinityTimeout > 0 {
		vs.Flags |= ipvs.FlagPersistent
		vs.PersistenceTimeout = sp.AffinityTimeout
	}
	fe := p.endpoints(i, f)
	fe.used = true
	local := sp.ExternalPolicyLocal
	if cd.kind == kindClusterIP {
		local = sp.InternalPolicyLocal
	}
	src := fe.cluster
	if local {
		src = fe.local
	}
	vs.RealServers = slices.Clone(src)
	if cd.bind {
		p.bound = append(p.bound, cd.key.Address)
	}

	e := iptables.Entry{IP: cd.key.Address, Protocol: sp.Protocol, Port: cd.key.Port}
	switch cd.kind {
	case kindClusterIP:
		p.add(f, iptables.SetClusterIP, e)
	case kindExternalIP:
		if sp.ExternalPolicyLocal {
			p.add(f, iptables.SetExternalIPLocal, e)
		} else {
			p.add(f, iptables.SetExternalIP, e)
		}
	case kindLoadBalancer:
		p.add(f, iptables.SetLoadBalancer, e)
		if sp.ExternalPolicyLocal {
			p.add(f, iptables.SetLoadBalancerLocal, e)
		}
		fw, fromNode := false, false
		for _, r := range sp.LoadBalancerSourceRanges {
			if !r.IsValid() || r.Addr().Is4In6() || famOf(r.Addr()) != f {
				continue
			}
			fw = true
			r = r.Masked()
			e2 := e
			e2.Net = r
			p.add(f, iptables.SetLoadBalancerSourceCIDR, e2)
			if !fromNode {
				for _, a := range p.o.LocalAddrs {
					if r.Contains(a.WithZone("")) {
						fromNode = true
						break
					}
				}
			}
		}
		if fw {
			p.add(f, iptables.SetLoadBalancerFW, e)
		}
		if fromNode {
			e2 := e
			e2.Net = iptables.HostPrefix(cd.key.Address)
			p.add(f, iptables.SetLoadBalancerSourceIP, e2)
		}
		if sp.HealthCheckNodePort != 0 {
			p.add(f, iptables.SetHealthCheckNodePort, iptables.Entry{Port: sp.HealthCheckNodePort})
		}
	case kindNodePort:
		np := iptables.Entry{Port: cd.key.Port}
		switch sp.Protocol {
		case model.TCP:
			p.add(f, iptables.SetNodePortTCP, np)
			if sp.ExternalPolicyLocal {
				p.add(f, iptables.SetNodePortLocalTCP, np)
			}
		case model.UDP:
			p.add(f, iptables.SetNodePortUDP, np)
			if sp.ExternalPolicyLocal {
				p.add(f, iptables.SetNodePortLocalUDP, np)
			}
		case model.SCTP:
			p.add(f, iptables.SetNodePortSCTP, e)
			if sp.ExternalPolicyLocal {
				p.add(f, iptables.SetNodePortLocalSCTP, e)
			}
		}
		if sp.HealthCheckNodePort != 0 {
			p.add(f, iptables.SetHealthCheckNodePort, iptables.Entry{Port: sp.HealthCheckNodePort})
		}
	}
	return vs
}

// endpoints categorises service port i's endpoints of family f as
// kube-proxy's CategorizeEndpoints does: Cluster policy uses the ready
// endpoints (narrowed by topology hints when they apply), or if none is
// ready the serving and terminating ones; Local policy uses this node's
// ready endpoints, or if none, this node's serving and terminating ones.
// Non-serving endpoints are never used.
func (p *planner) endpoints(i, f int) *famEndpoints {
	fe := &p.svcs[i].fam[f]
	if fe.done {
		return fe
	}
	fe.done = true
	sp := &p.c.Services[i]
	eps := p.c.Endpoints[sp.Name]
	node := p.o.NodeName
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
			} else if p.zone != "" && slices.Contains(e.ZoneHints, p.zone) {
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
			return slices.Contains(e.ZoneHints, p.zone)
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
