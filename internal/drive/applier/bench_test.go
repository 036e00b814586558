package applier

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/addrmgr/addrmgrtest"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs/ipvstest"
)

// benchNodePortEvery: one service in this many also has a NodePort (the
// default range holds 2,768 ports).
const benchNodePortEvery = 4

// benchCluster is n single-stack IPv4 TCP services with m endpoints each,
// spread over 50 nodes (node-0, this node at address node, holds one in 50:
// KUBE-LOOP-BACK entries), one in benchNodePortEvery with a NodePort. moved
// replaces the first endpoint of service moved (-1: none) by a new address.
// BenchmarkKernelSync and BenchmarkPartialSync plan it.
func benchCluster(n, m, moved int, node netip.Addr) model.Cluster {
	c := model.Cluster{Endpoints: make(map[model.ServicePortName][]model.Endpoint, n)}
	for s := range n {
		sp := model.ServicePort{Name: model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "default", Name: fmt.Sprintf("svc-%05d", s)}, Port: "http"}, Protocol: model.TCP, Port: 80}
		sp.ClusterIPs = []netip.Addr{netip.AddrFrom4([4]byte{10, 96, byte(s >> 8), byte(s)})}
		if s%benchNodePortEvery == 0 {
			sp.NodePort = uint16(30000 + s/benchNodePortEvery)
		}
		c.Services = append(c.Services, sp)
		es := make([]model.Endpoint, m)
		for e := range m {
			k := s*m + e
			a := netip.AddrFrom4([4]byte{10, byte(128 + k>>16), byte(k >> 8), byte(k)})
			if s == moved && e == 0 {
				a = netip.AddrFrom4([4]byte{10, 255, 255, 1})
			}
			es[e] = model.Endpoint{Address: a, Port: 8080, NodeName: fmt.Sprintf("node-%d", k%50), Ready: true, Serving: true}
		}
		c.Endpoints[sp.Name] = es
	}
	c.Nodes = []model.Node{{Name: "node-0", Addresses: []netip.Addr{node}}}
	return c
}

// BenchmarkPartialSync is the applier's own share of a partial sync of one
// changed endpoint among 10,000 services × 10 endpoints, against in-memory
// fakes (no kernel): what does not depend on the change.
func BenchmarkPartialSync(b *testing.B) {
	opts := planner.Options{NodeName: "node-0", LocalAddrs: []netip.Addr{nodeIP}, Scheduler: "rr",
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.128.0.0/9")}, MasqueradeBit: planner.DefaultMasqueradeBit}
	const n = 10000
	st := planner.Plan(benchCluster(n, 10, -1, nodeIP), opts)
	st2 := planner.Plan(benchCluster(n, 10, n/2, nodeIP), opts)
	changed := types.NamespacedName{Namespace: "default", Name: fmt.Sprintf("svc-%05d", n/2)}
	link := addrmgrtest.NewFakeLink()
	g := guard.New(guard.Inputs{LocalAddrs: []netip.Addr{nodeIP}, PodCIDRs: opts.ClusterCIDRs})
	mgr := addrmgr.NewManager(link, g, nil)
	if err := mgr.Watch(b.Context(), nil); err != nil {
		b.Fatal(err)
	}
	a := New(ipvs.NewReconciler(ipvstest.NewFakeTable(), ipvs.Options{}), mgr, &fakeRules{}, nil)
	if res, err := a.Full(&st, []netip.Addr{nodeIP}); err != nil || res.Err() != nil {
		b.Fatal(err, res.Err())
	}
	var took Timings
	b.ResetTimer()
	for i := range b.N {
		want := &st2
		if i%2 == 1 {
			want = &st
		}
		link.Flush()
		res, err := a.Partial(want, changed)
		if err != nil || res.Err() != nil || res.IPVS.Changes() == 0 || (i > 0 && res.AddressesDumped) {
			b.Fatal(err, res.Err(), res.AddressesDumped)
		}
		took.Add(res.Took)
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(per(took.Dump), "dump-ms")
	b.ReportMetric(per(took.Journal), "journal-ms")
	b.ReportMetric(per(took.IPVS), "ipvs-ms")
	b.ReportMetric(per(took.Bind), "bind-ms")
}
