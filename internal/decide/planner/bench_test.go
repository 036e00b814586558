package planner

import (
	"github.com/ipvs-proxy/ipvs-proxy/iptables"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// benchCluster is a large cluster: services ClusterIP services with
// endpointsPer endpoints each, spread over 100 nodes (node n1 is the planning
// node). Every 5th service also has a NodePort, every 10th an externalIP,
// every 20th a LoadBalancer IP with externalTrafficPolicy Local, a health
// check node port and a source range, every 7th ClientIP affinity, every 3rd
// UDP. Every 50th endpoint is terminating.
func benchCluster(services, endpointsPer int) (model.Cluster, Options) {
	c := model.Cluster{Endpoints: make(map[model.ServicePortName][]model.Endpoint, services)}
	for n := 0; n < 100; n++ {
		c.Nodes = append(c.Nodes, model.Node{Name: "n" + strconv.Itoa(n+1),
			Addresses: []netip.Addr{netip.AddrFrom4([4]byte{10, 10, byte(n >> 8), byte(n + 1)})},
			Labels:    map[string]string{ZoneLabel: "z" + strconv.Itoa(n%3)}})
	}
	v4 := func(a, b, c, d int) netip.Addr { return netip.AddrFrom4([4]byte{byte(a), byte(b), byte(c), byte(d)}) }
	ep := 0
	for i := 0; i < services; i++ {
		sp := model.ServicePort{
			Name:       model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "ns" + strconv.Itoa(i%50), Name: "svc-" + strconv.Itoa(i)}, Port: "http"},
			Protocol:   model.TCP,
			Port:       80,
			ClusterIPs: []netip.Addr{v4(10, 96+i>>16, i>>8&0xff, i&0xff)},
		}
		if i%3 == 0 {
			sp.Protocol = model.UDP
		}
		if i%5 == 0 {
			sp.NodePort = uint16(30000 + i%2768)
		}
		if i%7 == 0 {
			sp.AffinityTimeout = 10800
		}
		if i%10 == 0 {
			sp.ExternalIPs = []netip.Addr{v4(203, 0, i>>8&0xff, i&0xff)}
		}
		if i%20 == 0 {
			sp.LoadBalancerIPs = []netip.Addr{v4(198, 51, i>>8&0xff, i&0xff)}
			sp.ExternalPolicyLocal = true
			sp.HealthCheckNodePort = uint16(32000 + i%700)
			sp.LoadBalancerSourceRanges = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
		}
		eps := make([]model.Endpoint, endpointsPer)
		for j := range eps {
			node := ep % 100
			eps[j] = model.Endpoint{
				Address:  v4(10, 128+ep>>16&0x3f, ep>>8&0xff, ep&0xff),
				Port:     8080,
				NodeName: c.Nodes[node].Name,
				Zone:     "z" + strconv.Itoa(node%3),
				Ready:    ep%50 != 0, Serving: true, Terminating: ep%50 == 0,
			}
			ep++
		}
		c.Endpoints[sp.Name] = eps
		c.Services = append(c.Services, sp)
	}
	sortServices(c.Services)
	o := Options{
		NodeName:      "n1",
		LocalAddrs:    []netip.Addr{v4(10, 10, 0, 1), v4(192, 168, 0, 1), v4(127, 0, 0, 1)},
		Scheduler:     "rr",
		MasqueradeBit: 14,
		ClusterCIDRs:  []netip.Prefix{netip.MustParsePrefix("10.128.0.0/10")},
	}
	return c, o
}

func sortServices(s []model.ServicePort) {
	slices.SortFunc(s, func(a, b model.ServicePort) int { return a.Name.Compare(b.Name) })
}

// BenchmarkPlan plans 10,000 services with 100,000 endpoints. Reproduce:
//
//	go test -run '^$' -bench BenchmarkPlan -benchmem -count 5 ./internal/decide/planner/
func BenchmarkPlan(b *testing.B) {
	c, o := benchCluster(10000, 10)
	b.ReportAllocs()
	b.ResetTimer()
	var st State
	for b.Loop() {
		st = Plan(c, o)
	}
	b.StopTimer()
	rs := 0
	for _, vs := range st.VirtualServers {
		rs += len(vs.RealServers)
	}
	b.ReportMetric(float64(len(st.VirtualServers)), "virtual-servers")
	b.ReportMetric(float64(rs), "real-servers")
	if hwm := vmHWM(); hwm > 0 {
		b.ReportMetric(hwm, "peak-RSS-MiB")
	}
}

func TestBenchClusterShape(t *testing.T) {
	c, o := benchCluster(10000, 10)
	n := 0
	for _, eps := range c.Endpoints {
		n += len(eps)
	}
	if len(c.Services) != 10000 || n != 100000 {
		t.Fatalf("%d services, %d endpoints", len(c.Services), n)
	}
	st := Plan(c, o)
	if len(st.Refusals) != 0 {
		t.Errorf("bench cluster has refusals: %v", st.Refusals[:min(3, len(st.Refusals))])
	}
	if len(st.VirtualServers) < 10000 {
		t.Errorf("%d virtual servers", len(st.VirtualServers))
	}
}

// vmHWM is the process's peak resident set size in MiB (VmHWM in
// /proc/self/status), input cluster included; 0 where unavailable.
func vmHWM() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" {
			kb, _ := strconv.Atoi(f[1])
			return float64(kb) / 1024
		}
	}
	return 0
}

// BenchmarkIncrementalUpdate is one EndpointSlice change with 10,000
// services × 10 endpoints planned: one service's ports planned again and
// the state patched (Update + State), what a partial sync plans. Reproduce:
//
//	go test -run '^$' -bench BenchmarkIncrementalUpdate -benchmem ./internal/decide/planner/
func BenchmarkIncrementalUpdate(b *testing.B) {
	c, o := benchCluster(10000, 10)
	inc := NewIncremental(o, c.Nodes, nil)
	for i := range c.Services {
		inc.Update(c.Services[i].Name.NamespacedName, c.Services[i:i+1], c.Endpoints, nil)
	}
	inc.State()
	sp := c.Services[4242]
	eps := slices.Clone(c.Endpoints[sp.Name])
	m := map[model.ServicePortName][]model.Endpoint{sp.Name: eps}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		i++
		eps[0].Address = netip.AddrFrom4([4]byte{10, 250, byte(i >> 8), byte(i)})
		inc.Update(sp.Name.NamespacedName, []model.ServicePort{sp}, m, nil)
		if st := inc.State(); len(st.VirtualServers) < 10000 {
			b.Fatalf("%d virtual servers", len(st.VirtualServers))
		}
	}
}

// BenchmarkReguard is a Node joining, then leaving, a cluster of 10,000
// services × 10 endpoints: Reguard and the State after it, what a partial
// sync plans for a Node change (none of the services names its address),
// against planning every service again (BenchmarkPlan). Reproduce:
//
//	go test -run '^$' -bench BenchmarkReguard -benchmem ./internal/decide/planner/
func BenchmarkReguard(b *testing.B) {
	c, o := benchCluster(10000, 10)
	inc := PlanAll(c, o)
	inc.State()
	joined := append(slices.Clone(c.Nodes), model.Node{Name: "joined", Addresses: []netip.Addr{netip.MustParseAddr("192.0.2.77")}})
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		i++
		nodes := c.Nodes
		if i%2 == 1 {
			nodes = joined
		}
		services, ok := inc.Reguard(o, nodes, nil)
		if !ok || len(services) != 0 {
			b.Fatalf("Reguard = %d services, %v", len(services), ok)
		}
		if st := inc.State(); len(st.VirtualServers) < 10000 {
			b.Fatalf("%d virtual servers", len(st.VirtualServers))
		}
	}
}

// BenchmarkPlanLocalEndpoints plans 10,000 services whose 100,000
// endpoints are all on the planning node (the daemon soak's shape: every
// endpoint a hairpin entry of KUBE-LOOP-BACK) and reports the live heap
// of the incremental plan and its state, as the daemon keeps them.
//
//	go test -run '^$' -bench PlanLocalEndpoints -benchmem -count 3 ./internal/decide/planner/
func BenchmarkPlanLocalEndpoints(b *testing.B) {
	c, o := benchCluster(10000, 10)
	for _, eps := range c.Endpoints {
		for i := range eps {
			eps[i].NodeName = o.NodeName
		}
	}
	b.ReportAllocs()
	var inc *Incremental
	var st State
	var before, after runtime.MemStats
	for b.Loop() {
		inc, st = nil, State{}
		runtime.GC()
		runtime.ReadMemStats(&before)
		inc = PlanAll(c, o)
		st = inc.State()
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "live-MiB")
	loop := 0
	for _, s := range st.IPSets {
		if s.Name == iptables.SetLoopBack {
			loop += len(s.Entries)
		}
	}
	// Every 50th endpoint is terminating, not served: 98,000.
	if loop != 98000 || inc == nil {
		b.Fatalf("%d KUBE-LOOP-BACK entries, want 98,000", loop)
	}
}
