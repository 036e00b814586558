package planner

import (
	"bytes"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

var (
	addr = netip.MustParseAddr
	pfx  = netip.MustParsePrefix
)

func spn(name, port string) model.ServicePortName {
	return model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "default", Name: name}, Port: port}
}

// svc is a TCP ClusterIP service port "default/NAME:http" on port 80.
func svc(name string, clusterIPs ...string) model.ServicePort {
	sp := model.ServicePort{Name: spn(name, "http"), Protocol: model.TCP, Port: 80}
	for _, c := range clusterIPs {
		sp.ClusterIPs = append(sp.ClusterIPs, addr(c))
	}
	return sp
}

func ready(ip string, port uint16, node string) model.Endpoint {
	return model.Endpoint{Address: addr(ip), Port: port, NodeName: node, Ready: true, Serving: true}
}

func terminating(ip string, port uint16, node string, serving bool) model.Endpoint {
	return model.Endpoint{Address: addr(ip), Port: port, NodeName: node, Serving: serving, Terminating: true}
}

var testNodes = []model.Node{
	{Name: "n1", Addresses: []netip.Addr{addr("10.10.0.1"), addr("fd00:10::1")}, Labels: map[string]string{ZoneLabel: "z1"}},
	{Name: "n2", Addresses: []netip.Addr{addr("10.10.0.2"), addr("fd00:10::2")}, Labels: map[string]string{ZoneLabel: "z2"}},
}

// opts plans on n1, an IPv4-only node (its link-local IPv6 address does not
// make it an IPv6 node).
func opts() Options {
	return Options{
		NodeName:      "n1",
		LocalAddrs:    []netip.Addr{addr("10.10.0.1"), addr("127.0.0.1"), addr("fe80::1")},
		Scheduler:     "rr",
		MasqueradeBit: 14,
		ClusterCIDRs:  []netip.Prefix{pfx("10.0.0.0/16"), pfx("fd00:1::/64")},
	}
}

func dualOpts() Options {
	o := opts()
	o.LocalAddrs = append(o.LocalAddrs, addr("fd00:10::1"))
	return o
}

func cluster(eps map[model.ServicePortName][]model.Endpoint, svcs ...model.ServicePort) model.Cluster {
	slices.SortFunc(svcs, func(a, b model.ServicePort) int { return strings.Compare(a.Name.String(), b.Name.String()) })
	return model.Cluster{Services: svcs, Endpoints: eps, Nodes: testNodes}
}

func findVS(st State, proto model.Protocol, ip string, port uint16) *ipvs.VirtualServer {
	for i := range st.VirtualServers {
		vs := &st.VirtualServers[i]
		if vs.Protocol == proto && vs.Address == addr(ip) && vs.Port == port {
			return vs
		}
	}
	return nil
}

func rsList(vs *ipvs.VirtualServer) []string {
	if vs == nil {
		return nil
	}
	out := []string{}
	for _, rs := range vs.RealServers {
		out = append(out, netip.AddrPortFrom(rs.Address, rs.Port).String())
	}
	return out
}

func entries(st State, set string) []string {
	for _, s := range st.IPSets {
		if s.Name == set {
			out := []string{}
			for _, e := range s.Entries {
				out = append(out, string(iptables.AppendEntry(nil, s.Type, e)))
			}
			return out
		}
	}
	return nil
}

func addrs(st State) []string {
	out := []string{}
	for _, p := range st.Addresses {
		out = append(out, p.String())
	}
	return out
}

func refusal(st State, reason model.Reason, address string) *model.Refusal {
	for i := range st.Refusals {
		if r := &st.Refusals[i]; r.Reason == reason && r.Address == address {
			return r
		}
	}
	return nil
}

func eq(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s = %q, want %q", what, got, want)
	}
}

func TestClusterIP(t *testing.T) {
	sp := svc("web", "10.96.0.10")
	c := cluster(map[model.ServicePortName][]model.Endpoint{sp.Name: {ready("10.0.2.5", 8080, "n2"), ready("10.0.1.5", 8080, "n1"), ready("10.0.1.5", 8080, "n1")}}, sp)
	st := Plan(c, opts())
	vs := findVS(st, model.TCP, "10.96.0.10", 80)
	if vs == nil {
		t.Fatalf("no virtual server: %+v", st.VirtualServers)
	}
	if vs.Scheduler != "rr" || vs.Flags != 0 || vs.Service.String() != "default/web:http" {
		t.Errorf("vs = %+v", vs)
	}
	eq(t, "real servers", rsList(vs), []string{"10.0.1.5:8080", "10.0.2.5:8080"})
	for _, rs := range vs.RealServers {
		if rs.Weight != 1 {
			t.Errorf("weight %d", rs.Weight)
		}
	}
	eq(t, "addresses", addrs(st), []string{"10.96.0.10/32"})
	eq(t, "KUBE-CLUSTER-IP", entries(st, "KUBE-CLUSTER-IP"), []string{"10.96.0.10,tcp:80"})
	eq(t, "KUBE-IPVS-IPS", entries(st, "KUBE-IPVS-IPS"), []string{"10.96.0.10"})
	eq(t, "KUBE-LOOP-BACK", entries(st, "KUBE-LOOP-BACK"), []string{"10.0.1.5,tcp:8080,10.0.1.5"})
	if len(st.Refusals) != 0 {
		t.Errorf("refusals %v", st.Refusals)
	}
	if len(st.Rulesets) != 1 || st.Rulesets[0].Family != iptables.FamilyIPv4 {
		t.Errorf("rulesets %+v", st.Rulesets)
	}
	if len(st.IPSets) != len(iptables.SetSpecs) {
		t.Errorf("%d sets, want every one of %d", len(st.IPSets), len(iptables.SetSpecs))
	}
}

func TestDualStack(t *testing.T) {
	sp := svc("web", "10.96.0.10", "fd00:96::10")
	sp.NodePort = 30080
	c := cluster(map[model.ServicePortName][]model.Endpoint{sp.Name: {ready("10.0.1.5", 8080, "n1"), ready("fd00:1::5", 8080, "n1")}}, sp)

	// IPv4-only node: the IPv6 cluster IP is refused, IPv6 endpoints ignored.
	st := Plan(c, opts())
	eq(t, "v4 real servers", rsList(findVS(st, model.TCP, "10.96.0.10", 80)), []string{"10.0.1.5:8080"})
	if findVS(st, model.TCP, "fd00:96::10", 80) != nil {
		t.Error("IPv6 virtual server on an IPv4-only node")
	}
	if refusal(st, model.ReasonUnsupportedFamily, "fd00:96::10") == nil {
		t.Errorf("no UnsupportedFamily refusal: %v", st.Refusals)
	}
	eq(t, "v4 NodePort", rsList(findVS(st, model.TCP, "10.10.0.1", 30080)), []string{"10.0.1.5:8080"})

	// Dual-stack node: both families, each with its own endpoints and sets.
	st = Plan(c, dualOpts())
	eq(t, "v6 real servers", rsList(findVS(st, model.TCP, "fd00:96::10", 80)), []string{"[fd00:1::5]:8080"})
	eq(t, "v6 NodePort", rsList(findVS(st, model.TCP, "fd00:10::1", 30080)), []string{"[fd00:1::5]:8080"})
	eq(t, "addresses", addrs(st), []string{"10.96.0.10/32", "fd00:96::10/128"})
	eq(t, "KUBE-6-CLUSTER-IP", entries(st, "KUBE-6-CLUSTER-IP"), []string{"fd00:96::10,tcp:80"})
	eq(t, "KUBE-6-NODE-PORT-TCP", entries(st, "KUBE-6-NODE-PORT-TCP"), []string{"30080"})
	if entries(st, "KUBE-6-LOAD-BALANCER-SOURCE-CID") == nil {
		t.Error("IPv6 set names are cut to 31 characters as kube-proxy cuts them")
	}
	if len(st.Rulesets) != 2 || st.Rulesets[1].Family != iptables.FamilyIPv6 {
		t.Errorf("rulesets %+v", st.Rulesets)
	}
	if !slices.IsSortedFunc(st.IPSets, func(a, b iptables.IPSet) int { return strings.Compare(a.Name, b.Name) }) {
		t.Error("ipsets not sorted")
	}
}

func TestNodePort(t *testing.T) {
	tcp := svc("tcp", "10.96.0.1")
	tcp.NodePort = 30001
	udp := svc("udp", "10.96.0.2")
	udp.Protocol, udp.NodePort = model.UDP, 30002
	sctp := svc("sctp", "10.96.0.3")
	sctp.Protocol, sctp.NodePort = model.SCTP, 30003
	c := cluster(nil, tcp, udp, sctp)
	o := opts()
	o.LocalAddrs = append(o.LocalAddrs, addr("192.168.1.1"))

	st := Plan(c, o)
	for _, a := range []string{"10.10.0.1", "192.168.1.1"} {
		if findVS(st, model.TCP, a, 30001) == nil || findVS(st, model.UDP, a, 30002) == nil || findVS(st, model.SCTP, a, 30003) == nil {
			t.Errorf("missing NodePort servers on %s", a)
		}
	}
	for _, a := range []string{"127.0.0.1", "fe80::1"} {
		if findVS(st, model.TCP, a, 30001) != nil {
			t.Errorf("NodePort on %s by default", a)
		}
	}
	eq(t, "KUBE-NODE-PORT-TCP", entries(st, "KUBE-NODE-PORT-TCP"), []string{"30001"})
	eq(t, "KUBE-NODE-PORT-UDP", entries(st, "KUBE-NODE-PORT-UDP"), []string{"30002"})
	eq(t, "KUBE-NODE-PORT-SCTP-HASH", entries(st, "KUBE-NODE-PORT-SCTP-HASH"), []string{"10.10.0.1,sctp:30003", "192.168.1.1,sctp:30003"})
	eq(t, "addresses (node addresses are never bound)", addrs(st), []string{"10.96.0.1/32", "10.96.0.2/32", "10.96.0.3/32"})
	if !strings.Contains(text(t, st), "-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT\n") {
		t.Error("default NodePort jump is by addrtype LOCAL")
	}

	o.NodePortAddresses = []netip.Prefix{pfx("192.168.0.0/16")}
	st = Plan(c, o)
	if findVS(st, model.TCP, "10.10.0.1", 30001) != nil || findVS(st, model.TCP, "192.168.1.1", 30001) == nil {
		t.Errorf("--nodeport-addresses not honoured: %+v", st.VirtualServers)
	}
	if !strings.Contains(text(t, st), "-A KUBE-SERVICES -d 192.168.1.1/32 -j KUBE-NODE-PORT\n") {
		t.Error("NodePort jump per selected address")
	}
	// The health check node ports listen where NodePorts are served.
	if a, restricted := NewIncremental(o, c.Nodes, nil).NodePortAddrs(); !restricted || !slices.Equal(a, []netip.Addr{addr("192.168.1.1")}) {
		t.Errorf("NodePortAddrs: %v restricted %v, want 192.168.1.1 restricted", a, restricted)
	}
	if _, restricted := NewIncremental(opts(), c.Nodes, nil).NodePortAddrs(); restricted {
		t.Error("NodePortAddrs restricted without --nodeport-addresses")
	}

	// --nodeport-addresses primary: the node's primary IPs only (kube-proxy's
	// GetNodeHostIPs, informers' Node.PrimaryIPs), nowhere while the Node is
	// unknown.
	o.NodePortAddresses, o.NodePortPrimary = nil, true
	c.Nodes = slices.Clone(c.Nodes)
	for i := range c.Nodes {
		if c.Nodes[i].Name == o.NodeName {
			c.Nodes[i].PrimaryIPs = []netip.Addr{addr("192.168.1.1")}
		}
	}
	st = Plan(c, o)
	if findVS(st, model.TCP, "10.10.0.1", 30001) != nil || findVS(st, model.TCP, "192.168.1.1", 30001) == nil {
		t.Errorf("--nodeport-addresses primary not honoured: %+v", st.VirtualServers)
	}
	o.NodeName = "unknown"
	st = Plan(c, o)
	if findVS(st, model.TCP, "10.10.0.1", 30001) != nil || findVS(st, model.TCP, "192.168.1.1", 30001) != nil {
		t.Errorf("--nodeport-addresses primary with no Node: NodePorts served: %+v", st.VirtualServers)
	}
}

func TestExternalAndLoadBalancer(t *testing.T) {
	sp := svc("lb", "10.96.0.20")
	sp.NodePort = 30020
	sp.ExternalIPs = []netip.Addr{addr("203.0.113.10")}
	sp.LoadBalancerIPs = []netip.Addr{addr("198.51.100.20")}
	sp.LoadBalancerSourceRanges = []netip.Prefix{pfx("10.10.0.0/24"), pfx("192.0.2.0/24"), pfx("fd00::/8")}
	sp.ExternalPolicyLocal = true
	sp.HealthCheckNodePort = 32000
	c := cluster(map[model.ServicePortName][]model.Endpoint{sp.Name: {ready("10.0.1.5", 80, "n1"), ready("10.0.2.5", 80, "n2")}}, sp)
	st := Plan(c, opts())

	eq(t, "cluster IP (Cluster policy)", rsList(findVS(st, model.TCP, "10.96.0.20", 80)), []string{"10.0.1.5:80", "10.0.2.5:80"})
	for _, k := range []struct {
		ip   string
		port uint16
	}{{"203.0.113.10", 80}, {"198.51.100.20", 80}, {"10.10.0.1", 30020}} {
		eq(t, "Local policy "+k.ip, rsList(findVS(st, model.TCP, k.ip, k.port)), []string{"10.0.1.5:80"})
	}
	eq(t, "addresses", addrs(st), []string{"10.96.0.20/32", "198.51.100.20/32", "203.0.113.10/32"})
	eq(t, "KUBE-EXTERNAL-IP", entries(st, "KUBE-EXTERNAL-IP"), []string{})
	eq(t, "KUBE-EXTERNAL-IP-LOCAL", entries(st, "KUBE-EXTERNAL-IP-LOCAL"), []string{"203.0.113.10,tcp:80"})
	eq(t, "KUBE-LOAD-BALANCER", entries(st, "KUBE-LOAD-BALANCER"), []string{"198.51.100.20,tcp:80"})
	eq(t, "KUBE-LOAD-BALANCER-LOCAL", entries(st, "KUBE-LOAD-BALANCER-LOCAL"), []string{"198.51.100.20,tcp:80"})
	eq(t, "KUBE-LOAD-BALANCER-FW", entries(st, "KUBE-LOAD-BALANCER-FW"), []string{"198.51.100.20,tcp:80"})
	eq(t, "KUBE-LOAD-BALANCER-SOURCE-CIDR", entries(st, "KUBE-LOAD-BALANCER-SOURCE-CIDR"),
		[]string{"198.51.100.20,tcp:80,10.10.0.0/24", "198.51.100.20,tcp:80,192.0.2.0/24"})
	eq(t, "KUBE-LOAD-BALANCER-SOURCE-IP (node inside a source range)", entries(st, "KUBE-LOAD-BALANCER-SOURCE-IP"), []string{"198.51.100.20,tcp:80,198.51.100.20"})
	eq(t, "KUBE-NODE-PORT-LOCAL-TCP", entries(st, "KUBE-NODE-PORT-LOCAL-TCP"), []string{"30020"})
	eq(t, "KUBE-HEALTH-CHECK-NODE-PORT", entries(st, "KUBE-HEALTH-CHECK-NODE-PORT"), []string{"32000"})
	eq(t, "KUBE-IPVS-IPS", entries(st, "KUBE-IPVS-IPS"), []string{"10.96.0.20", "198.51.100.20", "203.0.113.10"})

	// Cluster policy: the external sets, no Local variants.
	sp.ExternalPolicyLocal = false
	sp.LoadBalancerSourceRanges = nil
	st = Plan(cluster(c.Endpoints, sp), opts())
	eq(t, "KUBE-EXTERNAL-IP", entries(st, "KUBE-EXTERNAL-IP"), []string{"203.0.113.10,tcp:80"})
	eq(t, "KUBE-LOAD-BALANCER-LOCAL", entries(st, "KUBE-LOAD-BALANCER-LOCAL"), []string{})
	eq(t, "KUBE-LOAD-BALANCER-FW", entries(st, "KUBE-LOAD-BALANCER-FW"), []string{})
	eq(t, "external IP (Cluster policy)", rsList(findVS(st, model.TCP, "203.0.113.10", 80)), []string{"10.0.1.5:80", "10.0.2.5:80"})
}

func TestEndpointConditions(t *testing.T) {
	sp := svc("web", "10.96.0.40")
	tests := []struct {
		name string
		eps  []model.Endpoint
		want []string
	}{
		{"ready only", []model.Endpoint{ready("10.0.1.1", 80, "n1"), terminating("10.0.1.2", 80, "n1", true), {Address: addr("10.0.1.3"), Port: 80}}, []string{"10.0.1.1:80"}},
		{"none ready: serving terminating", []model.Endpoint{terminating("10.0.1.2", 80, "n2", true), terminating("10.0.1.3", 80, "n2", false), {Address: addr("10.0.1.4"), Port: 80}}, []string{"10.0.1.2:80"}},
		{"never non-serving", []model.Endpoint{terminating("10.0.1.3", 80, "n1", false), {Address: addr("10.0.1.4"), Port: 80, Serving: false}}, []string{}},
		{"invalid skipped", []model.Endpoint{{Address: netip.Addr{}, Port: 80, Ready: true, Serving: true}, ready("10.0.1.1", 0, "n1"), ready("::ffff:10.0.1.9", 80, "n1"), ready("10.0.1.1", 80, "")}, []string{"10.0.1.1:80"}},
	}
	for _, tt := range tests {
		st := Plan(cluster(map[model.ServicePortName][]model.Endpoint{sp.Name: tt.eps}, sp), opts())
		eq(t, tt.name, rsList(findVS(st, model.TCP, "10.96.0.40", 80)), tt.want)
	}

	// Local policy: this node's ready ones, else this node's serving+terminating.
	sp.InternalPolicyLocal = true
	st := Plan(cluster(map[model.ServicePortName][]model.Endpoint{sp.Name: {ready("10.0.2.1", 80, "n2"), terminating("10.0.1.2", 80, "n1", true)}}, sp), opts())
	eq(t, "local serving terminating", rsList(findVS(st, model.TCP, "10.96.0.40", 80)), []string{"10.0.1.2:80"})
}

func TestTopology(t *testing.T) {
	hinted := func(ip, node string, zones ...string) model.Endpoint {
		e := ready(ip, 80, node)
		e.ZoneHints = zones
		return e
	}
	sp := svc("web", "10.96.0.50")
	tests := []struct {
		name string
		eps  []model.Endpoint
		td   string
		want []string
	}{
		{"all hinted, own zone", []model.Endpoint{hinted("10.0.1.1", "n1", "z1"), hinted("10.0.2.1", "n2", "z2")}, "", []string{"10.0.1.1:80"}},
		{"one without hints: all", []model.Endpoint{hinted("10.0.1.1", "n1", "z1"), ready("10.0.2.1", 80, "n2")}, "", []string{"10.0.1.1:80", "10.0.2.1:80"}},
		{"no hint for our zone: all", []model.Endpoint{hinted("10.0.1.1", "n1", "z3"), hinted("10.0.2.1", "n2", "z2")}, "", []string{"10.0.1.1:80", "10.0.2.1:80"}},
		{"non-ready endpoints do not count", []model.Endpoint{hinted("10.0.1.1", "n1", "z1"), terminating("10.0.2.1", 80, "n2", true)}, "", []string{"10.0.1.1:80"}},
		{"PreferSameNode", []model.Endpoint{
			{Address: addr("10.0.1.1"), Port: 80, NodeName: "n1", Ready: true, Serving: true, NodeHints: []string{"n1"}, ZoneHints: []string{"z1"}},
			{Address: addr("10.0.1.2"), Port: 80, NodeName: "n3", Ready: true, Serving: true, NodeHints: []string{"n3"}, ZoneHints: []string{"z1"}},
			{Address: addr("10.0.2.1"), Port: 80, NodeName: "n2", Ready: true, Serving: true, NodeHints: []string{"n2"}, ZoneHints: []string{"z2"}},
		}, "PreferSameNode", []string{"10.0.1.1:80"}},
		{"node hints ignored without PreferSameNode", []model.Endpoint{
			{Address: addr("10.0.1.1"), Port: 80, NodeName: "n1", Ready: true, Serving: true, NodeHints: []string{"n1"}, ZoneHints: []string{"z1"}},
			{Address: addr("10.0.1.2"), Port: 80, NodeName: "n3", Ready: true, Serving: true, NodeHints: []string{"n3"}, ZoneHints: []string{"z1"}},
			{Address: addr("10.0.2.1"), Port: 80, NodeName: "n2", Ready: true, Serving: true, NodeHints: []string{"n2"}, ZoneHints: []string{"z2"}},
		}, "PreferClose", []string{"10.0.1.1:80", "10.0.1.2:80"}},
	}
	for _, tt := range tests {
		sp.TrafficDistribution = tt.td
		st := Plan(cluster(map[model.ServicePortName][]model.Endpoint{sp.Name: tt.eps}, sp), opts())
		eq(t, tt.name, rsList(findVS(st, model.TCP, "10.96.0.50", 80)), tt.want)
	}
	// A node without a zone label never narrows by zone.
	sp.TrafficDistribution = ""
	c := cluster(map[model.ServicePortName][]model.Endpoint{sp.Name: tests[0].eps}, sp)
	c.Nodes = []model.Node{{Name: "n1"}}
	eq(t, "no zone label", rsList(findVS(Plan(c, opts()), model.TCP, "10.96.0.50", 80)), []string{"10.0.1.1:80", "10.0.2.1:80"})
}

func TestSchedulerAndAffinity(t *testing.T) {
	def := svc("def", "10.96.0.60")
	mh := svc("mh", "10.96.0.61")
	mh.Scheduler = "mh"
	bad := svc("bad", "10.96.0.62")
	bad.Scheduler = "twos"
	aff := svc("aff", "10.96.0.63")
	aff.AffinityTimeout = 10800
	aff.NodePort = 30063
	aff.ExternalIPs = []netip.Addr{addr("203.0.113.63")}
	st := Plan(cluster(nil, def, mh, bad, aff), opts())

	if vs := findVS(st, model.TCP, "10.96.0.60", 80); vs == nil || vs.Scheduler != "rr" {
		t.Errorf("default scheduler: %+v", vs)
	}
	if vs := findVS(st, model.TCP, "10.96.0.61", 80); vs == nil || vs.Scheduler != "mh" || vs.Flags != ipvs.FlagSchedSH1|ipvs.FlagSchedSH2 {
		t.Errorf("mh without mh-fallback and mh-port: %+v", vs)
	}
	if findVS(st, model.TCP, "10.96.0.62", 80) != nil || slices.Contains(addrs(st), "10.96.0.62/32") {
		t.Error("unknown scheduler planned")
	}
	if r := refusal(st, model.ReasonUnknownScheduler, "twos"); r == nil || r.Subject.String() != "default/bad" || r.Field != FieldScheduler {
		t.Errorf("unknown scheduler refusal: %+v", r)
	}
	for _, k := range []struct {
		ip   string
		port uint16
	}{{"10.96.0.63", 80}, {"10.10.0.1", 30063}, {"203.0.113.63", 80}} {
		vs := findVS(st, model.TCP, k.ip, k.port)
		if vs == nil || vs.Flags&ipvs.FlagPersistent == 0 || vs.PersistenceTimeout != 10800 {
			t.Errorf("affinity on %s:%d: %+v", k.ip, k.port, vs)
		}
	}

	o := opts()
	o.Scheduler = "bogus"
	st = Plan(cluster(nil, def), o)
	if r := refusal(st, model.ReasonUnknownScheduler, "bogus"); r == nil || r.Field != FieldSchedulerFlag || len(st.VirtualServers) != 0 {
		t.Errorf("unknown default scheduler: %+v %+v", r, st.VirtualServers)
	}
}

func TestDuplicates(t *testing.T) {
	a := svc("a", "10.96.0.70")
	a.ExternalIPs = []netip.Addr{addr("203.0.113.70")}
	b := svc("b", "10.96.0.71")
	b.ExternalIPs = []netip.Addr{addr("203.0.113.70"), addr("10.96.0.70")}
	c := cluster(map[model.ServicePortName][]model.Endpoint{a.Name: {ready("10.0.1.1", 80, "n1")}, b.Name: {ready("10.0.1.2", 80, "n1")}}, b, a)
	st := Plan(c, opts())
	eq(t, "external IP: first by name wins", rsList(findVS(st, model.TCP, "203.0.113.70", 80)), []string{"10.0.1.1:80"})
	eq(t, "cluster IP wins over another's external IP", rsList(findVS(st, model.TCP, "10.96.0.70", 80)), []string{"10.0.1.1:80"})
	n := 0
	for _, r := range st.Refusals {
		if r.Reason == model.ReasonDuplicateVirtual {
			n++
			if r.Subject.String() != "default/b" || r.Field != FieldExternalIPs || !strings.Contains(r.Message, "default/a:http") {
				t.Errorf("duplicate refusal %+v", r)
			}
		}
	}
	if n != 2 {
		t.Errorf("%d duplicate refusals, want 2: %v", n, st.Refusals)
	}
	eq(t, "KUBE-EXTERNAL-IP (winner only)", entries(st, "KUBE-EXTERNAL-IP"), []string{"203.0.113.70,tcp:80"})
	if len(st.VirtualServers) != 3 {
		t.Errorf("%d virtual servers, want 3", len(st.VirtualServers))
	}
}

func TestExcludeCIDRs(t *testing.T) {
	sp := svc("web", "10.96.0.80")
	sp.ExternalIPs = []netip.Addr{addr("10.200.0.1")}
	sp.NodePort = 30080
	o := opts()
	o.ExcludeCIDRs = []netip.Prefix{pfx("10.200.0.0/16"), pfx("10.10.0.0/24")}
	st := Plan(cluster(nil, sp), o)
	if findVS(st, model.TCP, "10.200.0.1", 80) != nil || findVS(st, model.TCP, "10.10.0.1", 30080) != nil {
		t.Error("virtual server planned inside --ipvs-exclude-cidrs")
	}
	if refusal(st, model.ReasonExcludedCIDR, "10.200.0.1") == nil || refusal(st, model.ReasonExcludedCIDR, "10.10.0.1") == nil {
		t.Errorf("refusals %v", st.Refusals)
	}
	eq(t, "addresses", addrs(st), []string{"10.96.0.80/32"})
}

// TestNodeIPGuard is the seed article's disaster: an externalIP (or LB IP)
// that is a node's address.
func TestNodeIPGuard(t *testing.T) {
	own := svc("own", "10.96.0.90")
	own.ExternalIPs = []netip.Addr{addr("10.10.0.1")} // n1's, planning on n1
	other := svc("other", "10.96.0.91")
	other.ExternalIPs = []netip.Addr{addr("10.10.0.2")} // n2's
	lb := svc("lb", "10.96.0.92")
	lb.LoadBalancerIPs = []netip.Addr{addr("10.10.0.2")}
	bad := svc("bad", "127.0.0.1", "10.0.5.5") // loopback and pod-network cluster IPs
	bad.ExternalIPs = []netip.Addr{addr("169.254.169.254"), addr("224.0.0.5")}
	prot := svc("prot", "10.96.0.93")
	prot.ExternalIPs = []netip.Addr{addr("10.10.0.254"), addr("172.16.5.5"), addr("10.10.0.100")}
	eps := map[model.ServicePortName][]model.Endpoint{own.Name: {ready("10.0.1.1", 80, "n1")}}
	c := cluster(eps, own, other, lb, bad, prot)
	o := opts()
	o.Gateways = []netip.Addr{addr("10.10.0.254")}
	o.ProtectedCIDRs = []netip.Prefix{pfx("172.16.0.0/12")}
	o.APIServerAddrs = []netip.Addr{addr("10.10.0.100")}

	st := Plan(c, o)
	eq(t, "addresses: no protected address ever bound", addrs(st), []string{"10.96.0.90/32", "10.96.0.91/32", "10.96.0.92/32", "10.96.0.93/32"})
	eq(t, "KUBE-IPVS-IPS", entries(st, "KUBE-IPVS-IPS"), []string{"10.96.0.90", "10.96.0.91", "10.96.0.92", "10.96.0.93"})
	eq(t, "own node IP still served at L4", rsList(findVS(st, model.TCP, "10.10.0.1", 80)), []string{"10.0.1.1:80"})
	if findVS(st, model.TCP, "10.10.0.2", 80) != nil {
		t.Error("another node's address is not served here")
	}
	eq(t, "KUBE-EXTERNAL-IP", entries(st, "KUBE-EXTERNAL-IP"), []string{"10.10.0.1,tcp:80"})
	for _, w := range []struct {
		svc, field, addr string
		reason           model.Reason
	}{
		{"default/own", FieldExternalIPs, "10.10.0.1", model.ReasonNodeIP},
		{"default/other", FieldExternalIPs, "10.10.0.2", model.ReasonNodeIP},
		{"default/lb", FieldLoadBalancer, "10.10.0.2", model.ReasonNodeIP},
		{"default/bad", FieldClusterIPs, "127.0.0.1", model.ReasonLoopback},
		{"default/bad", FieldClusterIPs, "10.0.5.5", model.ReasonPodCIDR},
		{"default/bad", FieldExternalIPs, "169.254.169.254", model.ReasonLinkLocal},
		{"default/bad", FieldExternalIPs, "224.0.0.5", model.ReasonMulticast},
		{"default/prot", FieldExternalIPs, "10.10.0.254", model.ReasonGateway},
		{"default/prot", FieldExternalIPs, "172.16.5.5", model.ReasonProtectedCIDR},
		{"default/prot", FieldExternalIPs, "10.10.0.100", model.ReasonAPIServer},
	} {
		var r *model.Refusal
		for i := range st.Refusals {
			if x := &st.Refusals[i]; x.Subject.String() == w.svc && x.Address == w.addr {
				r = x
			}
		}
		if r == nil || r.Reason != w.reason || r.Field != w.field || r.Message == "" {
			t.Errorf("refusal for %s %s: got %+v", w.svc, w.addr, r)
		}
	}
	if findVS(st, model.TCP, "127.0.0.1", 80) != nil || findVS(st, model.TCP, "169.254.169.254", 80) != nil {
		t.Error("never-a-VIP address planned")
	}

	o.RefuseNodeExternalIPs = true
	st = Plan(c, o)
	if findVS(st, model.TCP, "10.10.0.1", 80) != nil {
		t.Error("--refuse-node-external-ips: own node IP must get no virtual server")
	}
	eq(t, "KUBE-EXTERNAL-IP", entries(st, "KUBE-EXTERNAL-IP"), []string{})
	if r := refusal(st, model.ReasonNodeIP, "10.10.0.1"); r == nil || !strings.Contains(r.Message, "--refuse-node-external-ips") {
		t.Errorf("refusal %+v", r)
	}

	// A protected cluster IP that is a local address: served, never bound.
	ps := svc("protcip", "10.10.0.1")
	st = Plan(cluster(nil, ps), opts())
	if findVS(st, model.TCP, "10.10.0.1", 80) == nil || len(st.Addresses) != 0 || refusal(st, model.ReasonNodeIP, "10.10.0.1") == nil {
		t.Errorf("protected cluster IP: %+v %v %v", st.VirtualServers, st.Addresses, st.Refusals)
	}
}

func TestRefusalsMergedAndSorted(t *testing.T) {
	c := cluster(nil, svc("z", "10.96.0.1"))
	c.Services[0].ExternalIPs = []netip.Addr{addr("127.0.0.1")}
	c.Refusals = []model.Refusal{
		{Subject: subject("default/b"), Field: "spec.ports", Address: "x", Reason: model.ReasonInvalidPort, Message: "m"},
		{Subject: subject("default/a"), Field: "spec.ports", Address: "x", Reason: model.ReasonInvalidPort, Message: "m"},
		{Subject: subject("default/a"), Field: "spec.ports", Address: "x", Reason: model.ReasonInvalidPort, Message: "m"},
	}
	st := Plan(c, opts())
	var got []string
	for _, r := range st.Refusals {
		got = append(got, r.Subject.String())
	}
	eq(t, "refusal services", got, []string{"default/a", "default/b", "default/z"})
	if c.Refusals[0].Subject.String() != "default/b" {
		t.Error("Plan modified its input")
	}
}

func TestMultiPortLoopback(t *testing.T) {
	// zookeeper-like: three ports, named, each with its own target port.
	var svcs []model.ServicePort
	eps := map[model.ServicePortName][]model.Endpoint{}
	for _, p := range []struct {
		name   string
		port   uint16
		target uint16
	}{{"client", 2181, 2181}, {"server", 2888, 2888}, {"leader", 3888, 3888}} {
		sp := model.ServicePort{Name: spn("zookeeper1", p.name), Protocol: model.TCP, Port: p.port, ClusterIPs: []netip.Addr{addr("10.96.1.1")}}
		svcs = append(svcs, sp)
		eps[sp.Name] = []model.Endpoint{ready("10.0.1.7", p.target, "n1")}
	}
	st := Plan(cluster(eps, svcs...), opts())
	if len(st.VirtualServers) != 3 {
		t.Fatalf("%d virtual servers", len(st.VirtualServers))
	}
	eq(t, "addresses", addrs(st), []string{"10.96.1.1/32"})
	eq(t, "KUBE-LOOP-BACK", entries(st, "KUBE-LOOP-BACK"), []string{"10.0.1.7,tcp:2181,10.0.1.7", "10.0.1.7,tcp:2888,10.0.1.7", "10.0.1.7,tcp:3888,10.0.1.7"})
}

func TestRulesFollowOptions(t *testing.T) {
	st := Plan(cluster(nil, svc("a", "10.96.0.1")), opts())
	txt := text(t, st)
	for _, want := range []string{
		"-A KUBE-SERVICES ! -s 10.0.0.0/16 -m comment --comment \"Kubernetes service cluster ip + port for masquerade purpose\" -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ\n",
		"-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000\n",
	} {
		if !strings.Contains(txt, want) {
			t.Errorf("missing %q", want)
		}
	}
	o := opts()
	o.MasqueradeAll, o.MasqueradeBit = true, 0
	txt = text(t, Plan(cluster(nil, svc("a", "10.96.0.1")), o))
	if !strings.Contains(txt, "-A KUBE-SERVICES -m comment --comment \"Kubernetes service cluster ip + port for masquerade purpose\" -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ\n") ||
		!strings.Contains(txt, "--set-xmark 0x1/0x1") {
		t.Error("--masquerade-all / --masquerade-bit 0 not honoured")
	}
	o = opts()
	o.ClusterCIDRs = nil
	txt = text(t, Plan(cluster(nil, svc("a", "10.96.0.1")), o))
	if !strings.Contains(txt, "--match-set KUBE-CLUSTER-IP src,dst -j KUBE-MARK-MASQ\n") {
		t.Error("without --cluster-cidr, node-originated VIP-sourced traffic is masqueraded (src,dst)")
	}
	// The rule set does not depend on the services.
	a := Plan(cluster(nil), opts())
	b := Plan(cluster(nil, svc("a", "10.96.0.1"), svc("b", "10.96.0.2")), opts())
	var ra, rb bytes.Buffer
	ra.Write(appendRulesets(nil, a.Rulesets))
	rb.Write(appendRulesets(nil, b.Rulesets))
	if ra.String() != rb.String() {
		t.Error("rule set changes with the services")
	}
}

func TestDeterministic(t *testing.T) {
	sp := svc("web", "10.96.0.10", "fd00:96::10")
	sp.NodePort = 30010
	sp.ExternalIPs = []netip.Addr{addr("203.0.113.1"), addr("10.10.0.2")}
	other := svc("api", "10.96.0.11")
	eps := []model.Endpoint{ready("10.0.1.1", 80, "n1"), ready("10.0.2.1", 80, "n2"), ready("fd00:1::1", 80, "n1"), ready("10.0.3.1", 80, "n3")}
	want := text(t, Plan(cluster(map[model.ServicePortName][]model.Endpoint{sp.Name: eps, other.Name: eps}, sp, other), dualOpts()))
	for i := 0; i < 5; i++ {
		e := slices.Clone(eps)
		slices.Reverse(e)
		if i%2 == 0 {
			e[0], e[2] = e[2], e[0]
		}
		o := dualOpts()
		slices.Reverse(o.LocalAddrs)
		got := text(t, Plan(cluster(map[model.ServicePortName][]model.Endpoint{sp.Name: e, other.Name: eps}, other, sp), o))
		if got != want {
			t.Fatalf("plan depends on input order:\n%s\nvs\n%s", got, want)
		}
	}
}

func text(t *testing.T, st State) string {
	t.Helper()
	var b bytes.Buffer
	if err := WriteText(&b, st); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// subject is the Service "namespace/name" as a refusal's subject.
func subject(s string) model.Subject {
	ns, name, _ := strings.Cut(s, "/")
	return model.ServiceSubject(types.NamespacedName{Namespace: ns, Name: name})
}

// TestSchedulerFlagsAnnotation: ipvs-proxy.io/scheduler-flags replaces the
// scheduler's default flags; a flag the scheduler does not read refuses the
// Service's ports and leaves the others served.
func TestSchedulerFlagsAnnotation(t *testing.T) {
	port := svc("port", "10.96.0.70")
	port.Scheduler, port.SchedulerFlags = "mh", "mh-port"
	sh := svc("sh", "10.96.0.71")
	sh.Scheduler, sh.SchedulerFlags = "sh", "sh-fallback,sh-port"
	bad := svc("bad", "10.96.0.72")
	bad.Scheduler, bad.SchedulerFlags = "mh", "sh-port"
	def := svc("def", "10.96.0.73")
	def.SchedulerFlags = "mh-fallback" // under the default rr
	st := Plan(cluster(nil, port, sh, bad, def), opts())

	if vs := findVS(st, model.TCP, "10.96.0.70", 80); vs == nil || vs.Flags != ipvs.FlagSchedSH2 {
		t.Errorf("mh-port only: %+v", vs)
	}
	if vs := findVS(st, model.TCP, "10.96.0.71", 80); vs == nil || vs.Flags != ipvs.FlagSchedSH1|ipvs.FlagSchedSH2 {
		t.Errorf("sh-fallback,sh-port: %+v", vs)
	}
	for _, c := range []struct{ ip, subject, value string }{
		{"10.96.0.72", "default/bad", "sh-port"}, {"10.96.0.73", "default/def", "mh-fallback"},
	} {
		if findVS(st, model.TCP, c.ip, 80) != nil || slices.Contains(addrs(st), c.ip+"/32") {
			t.Errorf("%s planned with flags its scheduler does not read", c.subject)
		}
		r := refusal(st, model.ReasonInvalidSchedulerFlags, c.value)
		if r == nil || r.Subject.String() != c.subject || r.Field != FieldSchedFlags {
			t.Errorf("%s: refusal %+v", c.subject, r)
		}
	}
}
