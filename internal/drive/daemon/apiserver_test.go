package daemon

import (
	"net/netip"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/drive/applier"
	"github.com/ipvs-proxy/ipvs-proxy/internal/edge/nodeenv"
)

// stateApplier keeps the last state it was given.
type stateApplier struct{ st *planner.State }

func (a *stateApplier) Full(st *planner.State, _ []netip.Addr) (*applier.Result, error) {
	a.st = st
	return &applier.Result{}, nil
}

func (a *stateApplier) Partial(st *planner.State, _ applier.Index, _ ...types.NamespacedName) (*applier.Result, error) {
	a.st = st
	return &applier.Result{}, nil
}

// TestAPIServerIdentity: the address the proxy dials is the API server
// only when it is not a Service IP. deploy/base runs in a pod, where the
// client dials KUBERNETES_SERVICE_HOST, the kubernetes Service's ClusterIP
// 10.96.0.1: that VIP is bound like any ClusterIP, and the real API server
// (the default/kubernetes EndpointSlice's 10.0.2.100) is protected.
func TestAPIServerIdentity(t *testing.T) {
	a := netip.MustParseAddr
	for _, tc := range []struct {
		name       string
		api        guard.APIServer
		wantBound  []string
		wantRefuse map[string]model.Reason // externalIP -> reason
	}{
		{"in-cluster: KUBERNETES_SERVICE_HOST is the kubernetes ClusterIP",
			guard.APIServer{Dialed: []netip.Addr{a("10.96.0.1")}, InCluster: true},
			[]string{"10.96.0.1/32", "10.96.0.50/32", "198.51.100.7/32"},
			map[string]model.Reason{"10.0.2.100": model.ReasonAPIServer}},
		{"kubeconfig whose server is the kubernetes ClusterIP",
			guard.APIServer{Dialed: []netip.Addr{a("10.96.0.1")}},
			[]string{"10.96.0.1/32", "10.96.0.50/32", "198.51.100.7/32"},
			map[string]model.Reason{"10.0.2.100": model.ReasonAPIServer}},
		{"kubeconfig whose server is a load balancer in front of the API servers",
			guard.APIServer{Dialed: []netip.Addr{a("198.51.100.7")}},
			[]string{"10.96.0.1/32", "10.96.0.50/32"},
			map[string]model.Reason{"10.0.2.100": model.ReasonAPIServer, "198.51.100.7": model.ReasonAPIServer}},
		{"in-cluster with KUBERNETES_SERVICE_HOST overridden to that load balancer",
			guard.APIServer{Dialed: []netip.Addr{a("198.51.100.7")}, InCluster: true},
			[]string{"10.96.0.1/32", "10.96.0.50/32"},
			map[string]model.Reason{"10.0.2.100": model.ReasonAPIServer, "198.51.100.7": model.ReasonAPIServer}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := newFakeSource()
			src.api = []netip.Addr{a("10.0.2.100")}
			src.svcs[key("default/kubernetes")] = model.ServicePort{Name: model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "default", Name: "kubernetes"}, Port: "https"},
				Protocol: model.TCP, Port: 443, ClusterIPs: []netip.Addr{a("10.96.0.1")}}
			src.eps[key("default/kubernetes")] = []model.Endpoint{{Address: a("10.0.2.100"), Port: 6443, Ready: true, Serving: true}}
			// A tenant's Service asking for the real API server's address
			// and the load balancer's.
			src.svcs[key("ns/hostile")] = model.ServicePort{Name: model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "hostile"}, Port: "https"},
				Protocol: model.TCP, Port: 443, ClusterIPs: []netip.Addr{a("10.96.0.50")},
				ExternalIPs: []netip.Addr{a("10.0.2.100"), a("198.51.100.7")}}
			app := &stateApplier{}
			l := &Loop{Source: src, Applier: app, Options: testOpts, APIServer: tc.api}
			l.defaults()
			l.needFull = true
			l.syncOnce()
			if app.st == nil {
				t.Fatal("nothing applied")
			}
			var bound []string
			for _, p := range app.st.Addresses {
				bound = append(bound, p.String())
			}
			if !slices.Equal(bound, tc.wantBound) {
				t.Errorf("kube-ipvs0 = %v, want %v", bound, tc.wantBound)
			}
			got := map[string]model.Reason{}
			for _, r := range app.st.Refusals {
				got[r.Address] = r.Reason
				if r.Address == "10.96.0.1" {
					t.Errorf("the kubernetes Service's ClusterIP refused: %v", r)
				}
			}
			for addr, reason := range tc.wantRefuse {
				if got[addr] != reason {
					t.Errorf("externalIP %s: refusal %q, want %q (refusals %v)", addr, got[addr], reason, app.st.Refusals)
				}
			}
		})
	}
}

// TestInfrastructureFromEnv: what the node says (nodeenv.Env) reaches the
// guard: a next hop and a resolver are refused; a resolver that is a
// Service's ClusterIP (the cluster DNS) is programmed like any other; a
// changed route makes the next sync a full one (issue 14, item 5).
func TestInfrastructureFromEnv(t *testing.T) {
	a := netip.MustParseAddr
	src := newFakeSource()
	src.svcs[key("kube-system/kube-dns")] = model.ServicePort{Name: model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "kube-system", Name: "kube-dns"}, Port: "dns"},
		Protocol: model.UDP, Port: 53, ClusterIPs: []netip.Addr{a("10.96.0.10")}}
	src.svcs[key("ns/hostile")] = model.ServicePort{Name: model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "hostile"}, Port: "dns"},
		Protocol: model.UDP, Port: 53, ClusterIPs: []netip.Addr{a("10.96.0.50")}, ExternalIPs: []netip.Addr{a("192.0.2.53"), a("198.51.100.253")}}
	env := nodeenv.Env{LocalAddrs: []netip.Addr{a("198.51.100.1")}, LocalPrefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.1/24")},
		Gateways: []netip.Addr{a("198.51.100.254")}, NextHops: []netip.Addr{a("198.51.100.253")}, Resolvers: []netip.Addr{a("10.96.0.10"), a("192.0.2.53")}}
	app := &stateApplier{}
	l := &Loop{Source: src, Applier: app, Options: testOpts, Env: func(bool) (nodeenv.Env, error) { return env, nil }}
	l.defaults()
	l.needFull = true
	l.syncOnce()
	got := map[string]model.Reason{}
	for _, r := range app.st.Refusals {
		got[r.Address] = r.Reason
	}
	if got["192.0.2.53"] != model.ReasonResolver || got["198.51.100.253"] != model.ReasonGateway || got["10.96.0.10"] != "" {
		t.Errorf("refusals %v: want 192.0.2.53 Resolver, 198.51.100.253 Gateway, nothing for the cluster DNS 10.96.0.10", app.st.Refusals)
	}
	if !slices.Contains(app.st.Addresses, netip.MustParsePrefix("10.96.0.10/32")) {
		t.Errorf("the cluster DNS's ClusterIP is not bound: %v", app.st.Addresses)
	}
	// A new route: the next sync, asked for no service, is a full one.
	env.NextHops = append(env.NextHops, a("198.51.100.252"))
	src.mu.Lock()
	src.dirty[key("ns/hostile")] = true
	src.mu.Unlock()
	rec := &recordApplier{}
	l.Applier = rec
	l.syncOnce()
	if !rec.full {
		t.Error("a changed route did not make the sync a full one")
	}
}

// recordApplier records whether the last sync was a full one.
type recordApplier struct{ full bool }

func (r *recordApplier) Full(*planner.State, []netip.Addr) (*applier.Result, error) {
	r.full = true
	return &applier.Result{}, nil
}

func (r *recordApplier) Partial(*planner.State, applier.Index, ...types.NamespacedName) (*applier.Result, error) {
	r.full = false
	return &applier.Result{}, nil
}

// TestListenersFromEnv: a port the node listens on (read from its socket
// table) is never captured on its address at L4 (issue 14, item 6).
func TestListenersFromEnv(t *testing.T) {
	a := netip.MustParseAddr
	src := newFakeSource()
	src.svcs[key("ns/mgmt")] = model.ServicePort{Name: model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "mgmt"}, Port: "x"},
		Protocol: model.TCP, Port: 9100, ClusterIPs: []netip.Addr{a("10.96.0.60")}, ExternalIPs: []netip.Addr{a("198.51.100.1")}}
	env := nodeenv.Env{LocalAddrs: []netip.Addr{a("198.51.100.1")},
		Listeners: []model.Listener{{Protocol: model.TCP, Addr: a("0.0.0.0"), Port: 9100}}}
	app := &stateApplier{}
	l := &Loop{Source: src, Applier: app, Options: testOpts, Env: func(bool) (nodeenv.Env, error) { return env, nil }}
	l.defaults()
	l.needFull = true
	l.syncOnce()
	for _, vs := range app.st.VirtualServers {
		if vs.Address == a("198.51.100.1") {
			t.Errorf("the node's own tcp 0.0.0.0:9100 is captured: %v", vs.Key)
		}
	}
	if len(app.st.Refusals) != 1 || app.st.Refusals[0].Reason != model.ReasonNodeServicePort {
		t.Errorf("refusals %v, want one NodeServicePort", app.st.Refusals)
	}
}
