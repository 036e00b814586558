package planner

import (
	"fmt"
	"math/rand"
	"net/netip"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// TestReguardMatchesPlan plans random clusters, then moves the plan to
// other Nodes and API server addresses with Reguard and plans again only
// the services it names: the state must be exactly Plan's with the new
// Nodes and options. The addresses are the fuzz test's few, so that Nodes
// often take, and give back, a service's cluster IP, externalIP or
// load-balancer IP.
func TestReguardMatchesPlan(t *testing.T) {
	seen := time.Date(2026, 11, 27, 1, 0, 0, 0, time.UTC)
	named, all := 0, 0
	for seed := int64(1); seed <= 300; seed++ {
		r := rand.New(rand.NewSource(seed))
		randomBytes := bytesFrom(r)
		pick := func() []netip.Addr {
			var as []netip.Addr
			for range r.Intn(3) {
				as = append(as, fuzzAddrs[r.Intn(len(fuzzAddrs))])
			}
			return as
		}
		_, o := clusterFromBytes(randomBytes())
		live := newLiveCluster(testNodes)
		inc := NewIncremental(o, testNodes, nil)
		for range 8 {
			c, _ := clusterFromBytes(randomBytes())
			key := types.NamespacedName{Namespace: "default", Name: string(rune('a' + r.Intn(6)))}
			ports, eps := serviceOf(c, key)
			live.set(key, ports, eps, nil)
			inc.Update(key, ports, eps, nil)
		}
		for step := range 6 {
			// This node (n1) stays; n2 is renumbered; n3 joins, leaves
			// or is remembered after its deletion.
			nodes := []model.Node{testNodes[0], {Name: "n2", Addresses: pick()}}
			if r.Intn(2) == 0 {
				n3 := model.Node{Name: "n3", Addresses: pick()}
				if r.Intn(2) == 0 {
					n3.LastSeen = seen
				}
				nodes = append(nodes, n3)
			}
			var refusals []model.Refusal
			if r.Intn(3) == 0 {
				refusals = []model.Refusal{{Subject: model.NodeSubject("n2"), Field: "status.addresses", Reason: model.ReasonInvalidAddress, Message: "step " + fmt.Sprint(step)}}
			}
			o.APIServerAddrs = pick()
			services, ok := inc.Reguard(o, nodes, refusals)
			if !ok {
				t.Fatalf("seed %d step %d: Reguard refused a change of other Nodes and the API server's addresses", seed, step)
			}
			named += len(services)
			all += len(live.ports)
			live.nodes = nodes
			for _, k := range services {
				inc.Update(k, live.ports[k], live.eps[k], live.refusals[k])
			}
			want := live.cluster()
			want.Refusals = append(want.Refusals, refusals...)
			sameIncremental(t, fmt.Sprintf("seed %d step %d (%d of %d services planned again)", seed, step, len(services), len(live.ports)), inc, Plan(want, o))
		}
	}
	if named == 0 || named == all {
		t.Fatalf("Reguard named %d of %d services: the test checks nothing", named, all)
	}
	t.Logf("Reguard named %d of %d services", named, all)
}

// TestReguardNamesOnlyTheServicesOfTheAddress: a Node joining a cluster of
// 1,500 services with an address one service has as its externalIP names
// that service alone, and the service's virtual server goes.
func TestReguardNamesOnlyTheServicesOfTheAddress(t *testing.T) {
	c, o := benchCluster(1500, 4)
	inc := PlanAll(c, o)
	sp := c.Services[700]
	sp.ExternalIPs = []netip.Addr{addr("198.51.100.7")}
	k := sp.Name.NamespacedName
	eps := map[model.ServicePortName][]model.Endpoint{sp.Name: c.Endpoints[sp.Name]}
	inc.Update(k, []model.ServicePort{sp}, eps, nil)
	before := len(inc.State().VirtualServers)
	nodes := append(slices.Clone(c.Nodes), model.Node{Name: "joined", Addresses: []netip.Addr{addr("198.51.100.7")}})
	services, ok := inc.Reguard(o, nodes, nil)
	if !ok || !slices.Equal(services, []types.NamespacedName{k}) {
		t.Fatalf("Reguard = %v, %v; want [%s], true", services, ok, k)
	}
	inc.Update(k, []model.ServicePort{sp}, eps, nil)
	st := inc.State()
	if len(st.VirtualServers) != before-1 {
		t.Errorf("%d virtual servers, want %d: the externalIP that is now node joined's is still served", len(st.VirtualServers), before-1)
	}
	if !slices.ContainsFunc(st.Refusals, func(r model.Refusal) bool { return r.Reason == model.ReasonNodeIP && r.Address == "198.51.100.7" }) {
		t.Error("no NodeIP refusal of 198.51.100.7")
	}
}

// TestReguardRefusesOtherChanges: what is not the guard's address by
// address needs a new Incremental, and Reguard leaves the plan as it was.
func TestReguardRefusesOtherChanges(t *testing.T) {
	self := testNodes[0]
	self.Labels = map[string]string{ZoneLabel: "z9"}
	for name, change := range map[string]func(o *Options, nodes []model.Node) []model.Node{
		"this node's zone": func(_ *Options, _ []model.Node) []model.Node { return []model.Node{self, testNodes[1]} },
		"the scheduler":    func(o *Options, nodes []model.Node) []model.Node { o.Scheduler = "wrr"; return nodes },
		"protected CIDRs": func(o *Options, nodes []model.Node) []model.Node {
			o.ProtectedCIDRs = []netip.Prefix{pfx("10.96.0.0/16")}
			return nodes
		},
	} {
		c, o := clusterFromBytes([]byte("reguard refuses other changes"))
		inc := PlanAll(c, o)
		want := inc.State()
		o2 := o
		nodes := change(&o2, slices.Clone(testNodes))
		if services, ok := inc.Reguard(o2, nodes, nil); ok {
			t.Errorf("%s changed: Reguard = %v, true; want false", name, services)
		}
		sameIncremental(t, name, inc, want)
	}
}
