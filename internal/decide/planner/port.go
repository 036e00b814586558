package planner

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// claim is one virtual server a service port asks for, built as it is
// programmed if the port wins it (see resolve).
type claim struct {
	port *portPlan
	kind vipKind
	bind bool
	// list is which endpoint list its real servers are (Share reads it);
	// a byte in the padding after bind.
	list listKind
	vs   ipvs.VirtualServer
	// entries are the ipset entries the claim puts in the state while it
	// wins, KUBE-IPVS-IPS's included when it binds.
	entries []setEntry
}

// setEntry is an entry of the set SetSpecs[spec] of family fam: 40 B.
type setEntry struct {
	fam, spec uint8
	e         entryKey
}

// portPlan is one service port's share of the state, whatever other
// services ask for: 104 B, one per service port for the life of the plan,
// what most ports hold no more of kept apart (portExtras).
type portPlan struct {
	name   model.ServicePortName
	claims []*claim
	// created is the Service's creationTimestamp in Unix seconds, 0 when
	// unknown: the older of two claims of equal kind wins (beats).
	created int64
	// index is the port's position among its service's ports: the last
	// tie-break between two claims of equal kind and name.
	index int32
	// wins counts, per family, the port's claims that win their virtual
	// server (the hairpin entries are in the state while it is not 0).
	wins [2]int32
	// noLocal is, per family, what the port adds to NoLocalEndpoints.
	noLocal [2]noLocalPolicies
	// extras are the port's refusals and set entries outside its claims;
	// nil when it has none.
	extras *portExtras
}

// portExtras are what a port plan holds that most ports do not: a port
// without refusals, endpoints on this node or a healthCheckNodePort has
// none.
type portExtras struct {
	refusals []model.Refusal
	// loop are the hairpin entries (KUBE-LOOP-BACK) of each family, in the
	// state while the port wins a virtual server of that family.
	loop [2][]setEntry
	// health is the port's healthCheckNodePort entry of each family it
	// claims anything in, in the state while the port is planned, whether
	// or not its claims win (kube-proxy opens it for every service port
	// that has one, and the health server answers on it all the same).
	health [2][]setEntry
}

// noPortExtras are a port's extras when it has none.
var noPortExtras portExtras

// more are pp's extras to read: noPortExtras when it has none.
func (pp *portPlan) more() *portExtras {
	if pp.extras == nil {
		return &noPortExtras
	}
	return pp.extras
}

// extra are pp's extras to write, new when it had none.
func (pp *portPlan) extra() *portExtras {
	if pp.extras == nil {
		pp.extras = &portExtras{}
	}
	return pp.extras
}

// portPlanner plans one service port against the env.
type portPlanner struct {
	e   *env
	sp  *model.ServicePort
	eps []model.Endpoint
	fam [2]famEndpoints
	// svcFam are the families the port has cluster IPs in (serviceFamilies).
	svcFam [2]bool
	out    *portPlan
	// guarded are the addresses the port asked the guard about
	// (guard.Key), appended to what planPort was given.
	guarded []netip.Addr
	// flags are the scheduler flags of every virtual server of the port.
	flags ipvs.Flags
}

// schedFlags are the scheduler flags of the port's virtual servers under
// sched: the annotation's when the Service names some, else sched's
// defaults.
func (p *portPlanner) schedFlags(sched string) (ipvs.Flags, error) {
	if p.sp.SchedulerFlags == "" {
		return ipvs.SchedulerFlags(sched), nil
	}
	return ipvs.ParseSchedulerFlags(sched, p.sp.SchedulerFlags)
}

// planPort plans service port sp with its endpoints; index is its position
// among its service's ports. It returns the plan, and guarded with the
// addresses the port asked the guard about appended (guard.Key).
func (e *env) planPort(sp *model.ServicePort, eps []model.Endpoint, index int, guarded []netip.Addr) (*portPlan, []netip.Addr) {
	p := &portPlanner{e: e, sp: sp, svcFam: serviceFamilies(sp), out: &portPlan{name: sp.Name, index: int32(index), created: unixOrZero(sp.Created)}, guarded: guarded}
	p.eps = p.realServers(eps)
	p.service()
	for f := range p.fam {
		if len(p.fam[f].loop) == 0 || !p.e.families[f] {
			continue
		}
		// Sized once: the slice is kept for the life of the plan (one
		// entry per endpoint on this node).
		x := p.out.extra()
		x.loop[f] = make([]setEntry, 0, len(p.fam[f].loop))
		for _, rs := range p.fam[f].loop {
			x.loop[f] = p.add(x.loop[f], f, iptables.SetLoopBack,
				iptables.Entry{IP: rs.Address, Protocol: sp.Protocol, Port: rs.Port, Net: iptables.HostPrefix(rs.Address)})
		}
	}
	return p.out, p.guarded
}

// unixOrZero is t in Unix seconds, 0 for the zero time.
func unixOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}

func (p *portPlanner) refuse(field, addr string, r model.Reason, msg string) {
	x := p.out.extra()
	x.refusals = append(x.refusals, model.Refusal{
		Subject: model.ServiceSubject(p.sp.Name.NamespacedName),
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
	flags, err := p.schedFlags(sched)
	if err != nil {
		p.refuse(FieldSchedFlags, sp.SchedulerFlags, model.ReasonInvalidSchedulerFlags,
			err.Error()+"; port "+portLabel(sp)+" not planned")
		return
	}
	p.flags = flags
	if !sp.Protocol.Known() {
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
		for _, a := range p.e.npAddrs {
			if !p.svcFam[famOf(a)] {
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

// serviceFamilies are the families the service port has cluster IPs in
// (spec.ipFamilies); both when it has none (nothing to go by).
func serviceFamilies(sp *model.ServicePort) [2]bool {
	var fam [2]bool
	for _, a := range sp.ClusterIPs {
		if a.IsValid() {
			fam[famOf(a)] = true
		}
	}
	if !fam[0] && !fam[1] {
		return [2]bool{true, true}
	}
	return fam
}

// otherFamily refuses external address a (an externalIP or load balancer
// IP the guard lets through) when the Service has no cluster IP in its
// family: kube-proxy's proxier of that family never sees the Service.
func (p *portPlanner) otherFamily(kind vipKind, a netip.Addr) bool {
	if kind == kindClusterIP || p.svcFam[famOf(a)] {
		return false
	}
	p.refuse(kind.field(), a.String(), model.ReasonServiceFamily, "the Service has no "+familyWord(a)+
		" cluster IP (spec.ipFamilies); not planned, as kube-proxy")
	return true
}

// familyWord is "IPv4" or "IPv6": a's family in a message.
func familyWord(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
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
		p.refuse(field, a.String(), model.ReasonUnsupportedFamily, "this node has no "+familyWord(a)+" address; not planned")
		return
	}
	if containsAny(p.e.o.ExcludeCIDRs, a) {
		p.refuse(field, a.String(), model.ReasonExcludedCIDR, "inside --ipvs-exclude-cidrs; no virtual server, no binding, no rule")
		return
	}
	key := ipvs.Key{Protocol: p.sp.Protocol, Address: a, Port: port}
	p.guarded = append(p.guarded, guard.Key(a))
	v := p.e.guard.Check(a)
	if !v.Protected {
		if kind == kindExternalIP && slices.Contains(p.sp.OthersLoadBalancerIPs, a) {
			p.refuse(field, a.String(), model.ReasonAddressConflict,
				"the LoadBalancer IP of another Service (status.loadBalancer.ingress, written by its load-balancer controller): refused on every port, whatever the ports (CVE-2020-8554)")
			return
		}
		if p.otherFamily(kind, a) {
			return
		}
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
	case v.Local && p.otherFamily(kind, a):
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

func ipvsAddrPort(k ipvs.Key) string { return string(ipvs.AppendAddrPort(nil, k.Address, k.Port)) }

// add appends entry e of set (a SetSpecs name) of family f to es; a
// family the node does not plan gets nothing (never reached: its addresses
// are refused before they are claimed), nor does an entry keyOf cannot
// hold, which is refused (never reached either: service refuses the
// port's protocol first).
func (p *portPlanner) add(es []setEntry, f int, set string, e iptables.Entry) []setEntry {
	if !p.e.families[f] {
		return es
	}
	k, ok := keyOf(e)
	if !ok {
		p.refuse(FieldProtocol, string(e.Protocol), model.ReasonInvalidProtocol,
			"ipsets hold entries of TCP, UDP and SCTP only; no "+set+" entry for port "+portLabel(p.sp))
		return es
	}
	return append(es, setEntry{fam: uint8(f), spec: setIndex[set], e: k})
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
		vs: ipvs.VirtualServer{Key: key, Scheduler: sched, Flags: p.flags, Service: p.out.name, Kind: kind.addressKind()}}
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
	// fallback: an external server of the Local policy without a local
	// endpoint serves the node itself and its pods by the cluster's
	// endpoints; KUBE-EXTERNAL-NO-LOCAL keeps every other source out.
	fallback := false
	if local {
		src, c.list = fe.local, listLocal
		if len(src) == 0 && len(fe.cluster) > 0 {
			p.out.noLocal[f] |= noLocalOf(sp)
			if kind != kindClusterIP {
				src, fallback, c.list = fe.cluster, true, listLocalFallback
			}
		}
	}
	c.vs.RealServers = src
	p.out.claims = append(p.out.claims, c)

	var es []setEntry
	if bind {
		es = p.add(es, f, iptables.SetIPVSIPs, iptables.Entry{IP: key.Address})
	}
	e := iptables.Entry{IP: key.Address, Protocol: sp.Protocol, Port: key.Port}
	if fallback {
		es = p.add(es, f, iptables.SetExternalNoLocal, e)
	}
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
	// external addresses, claims lost to another service), through any
	// claim of the port (the set counts).
	if sp.HealthCheckNodePort != 0 && len(p.out.more().health[f]) == 0 && p.e.families[f] {
		x := p.out.extra()
		x.health[f] = p.add(nil, f, iptables.SetHealthCheckNodePort, iptables.Entry{Port: sp.HealthCheckNodePort})
	}
	c.entries = es
}
