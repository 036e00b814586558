package daemon

import (
	"net/netip"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/addrmgr"
	"github.com/ipvs-proxy/ipvs-proxy/addrmgr/addrmgrtest"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/health"
)

func host(s string) netip.Prefix {
	a := netip.MustParseAddr(s)
	return netip.PrefixFrom(a, a.BitLen())
}

// TestGuardProtectsThroughManager drives the real address manager with the
// daemon's guard holder: an allowed VIP is bound, a node's address is
// refused and, found on kube-ipvs0, removed; a node added later is
// protected after Set.
func TestGuardProtectsThroughManager(t *testing.T) {
	o := &planner.Options{LocalAddrs: []netip.Addr{netip.MustParseAddr("192.168.0.1")},
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}
	g := newGuardInForce(guard.New(planner.GuardInputs(o, []model.Node{{Name: "n2", Addresses: []netip.Addr{netip.MustParseAddr("192.168.0.2")}}})))
	link := addrmgrtest.NewFakeLink(host("192.168.0.2"))
	m := addrmgr.NewManager(link, g, nil)
	if _, err := m.Dump(); err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{host("10.96.0.10"), host("192.168.0.1"), host("192.168.0.2"), host("10.244.1.1")}
	if res := m.Unbind(want); res.Unbound != 1 {
		t.Fatalf("unbind %+v: the node address on kube-ipvs0 must go", res)
	}
	res := m.Bind(want, nil)
	if res.Bound != 1 || len(res.Refused) != 3 {
		t.Fatalf("bind %+v: want 10.96.0.10 bound, the rest refused", res)
	}
	reasons := map[netip.Prefix]model.Reason{}
	for _, r := range res.Refused {
		reasons[r.Prefix] = r.Reason
	}
	if want := map[netip.Prefix]model.Reason{host("192.168.0.1"): model.ReasonLocalAddress, host("192.168.0.2"): model.ReasonNodeIP,
		host("10.244.1.1"): model.ReasonPodCIDR}; !reflect.DeepEqual(reasons, want) {
		t.Errorf("refusals %v, want %v", reasons, want)
	}
	if v := g.Check(netip.MustParseAddr("10.96.0.11")); v.Protected {
		t.Error("a service VIP is protected")
	}
	g.Set(guard.New(planner.GuardInputs(o, []model.Node{{Name: "n3", Addresses: []netip.Addr{netip.MustParseAddr("10.96.0.11")}}})))
	if v := g.Check(netip.MustParseAddr("10.96.0.11")); !v.Protected || v.Reason != model.ReasonNodeIP {
		t.Errorf("after Set a node address is not protected: %+v", v)
	}
	if newGuardInForce(nil).Check(netip.MustParseAddr("10.96.0.11")).Protected {
		t.Error("the holder of no guard protects a VIP")
	}
}

func TestHealthCheckPorts(t *testing.T) {
	ep := func(addr, node string, ready bool) model.Endpoint {
		return model.Endpoint{Address: netip.MustParseAddr(addr), Port: 8080, NodeName: node, Ready: ready}
	}
	name := func(svc, port string) model.ServicePortName {
		return model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "ns", Name: svc}, Port: port}
	}
	c := model.Cluster{
		Services: []model.ServicePort{
			{Name: name("local", "http"), ExternalPolicyLocal: true, HealthCheckNodePort: 31000},
			{Name: name("local", "https"), ExternalPolicyLocal: true, HealthCheckNodePort: 31000},
			{Name: name("none-here", ""), ExternalPolicyLocal: true, HealthCheckNodePort: 31001},
			{Name: name("cluster", ""), HealthCheckNodePort: 0},
		},
		Endpoints: map[model.ServicePortName][]model.Endpoint{
			name("local", "http"):  {ep("10.244.0.1", "n1", true), ep("10.244.0.2", "n1", false), ep("10.244.1.1", "n2", true)},
			name("local", "https"): {ep("10.244.0.1", "n1", true), ep("10.244.0.3", "n1", true)},
			name("none-here", ""):  {ep("10.244.1.2", "n2", true)},
			name("cluster", ""):    {ep("10.244.0.4", "n1", true)},
		},
	}
	got := HealthCheckPorts(c, "n1")
	want := map[uint16]health.ServiceHealth{
		31000: {Namespace: "ns", Name: "local", LocalEndpoints: 2},
		31001: {Namespace: "ns", Name: "none-here", LocalEndpoints: 0},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("HealthCheckPorts:\n got %+v\nwant %+v", got, want)
	}
}
