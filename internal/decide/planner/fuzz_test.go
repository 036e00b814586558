package planner

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// fuzzAddrs mixes ordinary VIPs, node addresses, never-a-VIP classes,
// IPv6, an IPv4-mapped address and the invalid zero Addr.
var fuzzAddrs = []netip.Addr{
	{}, addr("10.96.0.1"), addr("10.96.0.2"), addr("10.10.0.1"), addr("10.10.0.2"), addr("127.0.0.1"),
	addr("0.0.0.0"), addr("255.255.255.255"), addr("169.254.169.254"), addr("224.0.0.1"), addr("10.0.0.5"),
	addr("fd00:96::1"), addr("fd00:10::1"), addr("::1"), addr("fe80::1"), addr("::ffff:10.96.0.1"), addr("203.0.113.9"),
}

var fuzzScheds = []string{"", "rr", "mh", "sh", "twos", "bogus"}
var fuzzProtos = []model.Protocol{model.TCP, model.UDP, model.SCTP, "icmp", ""}

// clusterFromBytes builds an arbitrary cluster, deterministic in data.
func clusterFromBytes(data []byte) (model.Cluster, Options) {
	i := 0
	next := func() int {
		if i >= len(data) {
			return 0
		}
		i++
		return int(data[i-1])
	}
	pick := func() netip.Addr { return fuzzAddrs[next()%len(fuzzAddrs)] }
	c := model.Cluster{Endpoints: map[model.ServicePortName][]model.Endpoint{}, Nodes: testNodes}
	nsvc := next() % 8
	for s := 0; s < nsvc; s++ {
		f := next()
		sp := model.ServicePort{
			Name:                spn(string(rune('a'+next()%4)), string(rune('p'+next()%2))),
			Protocol:            fuzzProtos[next()%len(fuzzProtos)],
			Port:                uint16(next() % 3 * 40),
			NodePort:            uint16(next() % 2 * 30000),
			Scheduler:           fuzzScheds[next()%len(fuzzScheds)],
			ExternalPolicyLocal: f&1 != 0,
			InternalPolicyLocal: f&2 != 0,
			AffinityTimeout:     uint32(f & 4 * 100),
			HealthCheckNodePort: uint16(f & 8 * 4000),
		}
		if f&16 != 0 {
			sp.TrafficDistribution = "PreferSameNode"
		}
		for k := next() % 3; k > 0; k-- {
			sp.ClusterIPs = append(sp.ClusterIPs, pick())
		}
		for k := next() % 3; k > 0; k-- {
			sp.ExternalIPs = append(sp.ExternalIPs, pick())
		}
		for k := next() % 2; k > 0; k-- {
			sp.LoadBalancerIPs = append(sp.LoadBalancerIPs, pick())
			sp.LoadBalancerSourceRanges = append(sp.LoadBalancerSourceRanges, netip.PrefixFrom(pick(), next()%140))
		}
		for k := next() % 4; k > 0; k-- {
			g := next()
			e := model.Endpoint{Address: pick(), Port: uint16(next() % 3), NodeName: []string{"", "n1", "n2"}[g%3],
				Ready: g&4 != 0, Serving: g&8 != 0, Terminating: g&16 != 0}
			if g&32 != 0 {
				e.ZoneHints = []string{"z1"}
			}
			if g&64 != 0 {
				e.NodeHints = []string{"n1"}
			}
			c.Endpoints[sp.Name] = append(c.Endpoints[sp.Name], e)
		}
		c.Services = append(c.Services, sp)
	}
	o := Options{NodeName: "n1", LocalAddrs: []netip.Addr{addr("10.10.0.1"), addr("127.0.0.1")}, MasqueradeBit: next() % 40,
		ClusterCIDRs: []netip.Prefix{pfx("10.0.0.0/16")}, ExcludeCIDRs: []netip.Prefix{pfx("203.0.113.0/24")}}
	if next()%2 == 1 {
		o.LocalAddrs = append(o.LocalAddrs, addr("fd00:10::1"))
	}
	if next()%2 == 1 {
		o.NodePortAddresses = []netip.Prefix{pfx("10.10.0.0/16"), {}}
	}
	o.RefuseNodeExternalIPs = next()%2 == 1
	o.Scheduler = fuzzScheds[next()%len(fuzzScheds)]
	return c, o
}

// FuzzPlan checks that Plan never panics, is deterministic, does not modify
// its input, keeps every slice sorted, never binds a protected address and
// gives every virtual server only real servers among its service port's
// endpoints.
func FuzzPlan(f *testing.F) {
	f.Add([]byte{3, 1, 0, 0, 1, 2, 1, 2, 2, 3, 4, 2, 7, 5, 1, 3, 1, 200, 9})
	f.Add([]byte{7, 255, 1, 1, 3, 4, 2, 2, 6, 6, 1, 1, 8, 2, 3, 5, 5, 5, 5, 5, 5, 1, 1, 1})
	f.Add(bytes.Repeat([]byte{5, 17, 3}, 40))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, o := clusterFromBytes(data)
		before := fmt.Sprintf("%#v %#v", c, o)
		st := Plan(c, o)
		if after := fmt.Sprintf("%#v %#v", c, o); after != before {
			t.Fatal("Plan modified its input")
		}
		checkRealServers(t, c, st)
		var a, b bytes.Buffer
		if err := WriteText(&a, st); err != nil {
			t.Fatal(err)
		}
		if err := WriteJSON(&b, st); err != nil {
			t.Fatal(err)
		}
		c2, o2 := clusterFromBytes(data)
		var a2 bytes.Buffer
		_ = WriteText(&a2, Plan(c2, o2))
		if a.String() != a2.String() {
			t.Fatal("Plan is not deterministic")
		}
		g := guard.New(guard.Inputs{LocalAddrs: o.LocalAddrs, Nodes: c.Nodes, PodCIDRs: o.ClusterCIDRs})
		for _, p := range st.Addresses {
			if g.Check(p.Addr()).Protected {
				t.Fatalf("protected address %s bound", p)
			}
		}
		for i := 1; i < len(st.VirtualServers); i++ {
			if ipvs.CompareKeys(st.VirtualServers[i-1].Key, st.VirtualServers[i].Key) >= 0 {
				t.Fatal("virtual servers not sorted or not unique")
			}
		}
		for i := 1; i < len(st.Refusals); i++ {
			if st.Refusals[i-1].Compare(st.Refusals[i]) >= 0 {
				t.Fatal("refusals not sorted or not unique")
			}
		}
		for _, r := range st.Refusals {
			if r.Subject.IsZero() || r.Field == "" || r.Reason == "" || r.Message == "" {
				t.Fatalf("incomplete refusal %+v", r)
			}
		}
	})
}

// checkRealServers asserts that every virtual server names a service port
// of the cluster and that each of its real servers is one of that port's
// endpoints (address and port), of the virtual server's family.
func checkRealServers(t *testing.T, c model.Cluster, st State) {
	t.Helper()
	type ap struct {
		a netip.Addr
		p uint16
	}
	eps := map[model.ServicePortName]map[ap]bool{}
	for _, sp := range c.Services {
		name := sp.Name
		if eps[name] == nil {
			eps[name] = map[ap]bool{}
		}
		for _, e := range c.Endpoints[sp.Name] {
			eps[name][ap{e.Address.WithZone(""), e.Port}] = true
		}
	}
	for _, vs := range st.VirtualServers {
		set, ok := eps[vs.Service]
		if !ok {
			t.Fatalf("virtual server %v for unknown service %q", vs.Key, vs.Service)
		}
		for _, rs := range vs.RealServers {
			if !set[ap{rs.Address, rs.Port}] {
				t.Fatalf("virtual server %v of %s: real server %v:%d is not an endpoint of the service", vs.Key, vs.Service, rs.Address, rs.Port)
			}
			if rs.Address.Is4() != vs.Address.Is4() {
				t.Fatalf("virtual server %v: real server %v of another family", vs.Key, rs.Address)
			}
		}
	}
}

// FuzzIncremental updates the services of a cluster one at a time, in an
// order and with contents taken from the input, and checks after every
// update that the incremental state is exactly Plan's for the cluster as
// it then is.
func FuzzIncremental(f *testing.F) {
	f.Add([]byte{3, 1, 0, 0, 1, 2, 1, 2, 2, 3, 4, 2, 7, 5, 1, 3, 1, 200, 9}, []byte{0, 1, 2, 3, 0})
	f.Add(bytes.Repeat([]byte{5, 17, 3}, 40), []byte{2, 2, 1, 0, 3, 3})
	f.Fuzz(func(t *testing.T, data, order []byte) {
		if len(order) > 64 {
			order = order[:64]
		}
		_, o := clusterFromBytes(data)
		live := newLiveCluster(testNodes)
		inc := NewIncremental(o, testNodes, nil)
		for i, b := range order {
			// Each step takes a version of one service from a cluster built
			// from the input shifted by the step.
			c, _ := clusterFromBytes(append(data[min(i, len(data)):], b))
			key := types.NamespacedName{Namespace: "default", Name: string(rune('a' + b%4))}
			ports, eps := serviceOf(c, key)
			var rs []model.Refusal
			if b&16 != 0 {
				rs = []model.Refusal{{Subject: model.ServiceSubject(key), Field: "spec", Reason: model.ReasonInvalidField, Message: "conversion"}}
			}
			live.set(key, ports, eps, rs)
			inc.Update(key, ports, eps, rs)
			sameIncremental(t, fmt.Sprintf("step %d", i), inc, Plan(live.cluster(), o))
		}
	})
}

// FuzzPlanText plans arbitrary clusters whose names, port names,
// schedulers and protocols, and conversion refusals, hold the arbitrary
// strings s1 and s2, and checks the text output with CheckText: every
// section header once and in order, every line of its section's shape, one
// line per refusal reading back to it. No value can forge a section, a
// refusal or a line.
func FuzzPlanText(f *testing.F) {
	f.Add([]byte{3, 1, 0, 0, 1, 2, 1, 2, 2, 3, 4, 2, 7, 5, 1, 3, 1, 200, 9}, "bogus\n# kube-ipvs0\n10.96.0.1/32\n# refused\nx y z W: m", "a b")
	f.Add(bytes.Repeat([]byte{5, 17, 3}, 40), "\r\u2028\"\\", "")
	f.Fuzz(func(t *testing.T, data []byte, s1, s2 string) {
		c, o := clusterFromBytes(data)
		for i := range c.Services {
			sp := &c.Services[i]
			switch i % 4 {
			case 0:
				sp.Scheduler = s1
			case 1:
				sp.Name.Port = s2
			case 2:
				sp.Name.Name, sp.Protocol = s1, model.Protocol(s2)
			case 3:
				sp.Name.Namespace = s2
			}
		}
		c.Refusals = append(c.Refusals, model.Refusal{Subject: model.ServiceSubject(types.NamespacedName{Namespace: s1, Name: s2}), Field: s2, Address: s1, Reason: model.Reason(s2), Message: s1 + s2})
		st := Plan(c, o)
		b := AppendText(nil, st)
		if err := CheckText(b, st); err != nil {
			t.Fatalf("%v:\n%s", err, b)
		}
	})
}
