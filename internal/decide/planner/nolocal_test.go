package planner

import (
	"net/netip"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

// TestNoLocalEndpoints: the Services counted in kube-proxy's
// sync_proxy_rules_no_local_endpoints_total, as its IPVS proxier's
// syncEndpoint counts them (k8s.io/kubernetes v1.34 pkg/proxy/ipvs): a
// virtual server with a Local policy, no usable endpoint on this node (n1)
// and some elsewhere; once per Service and family.
func TestNoLocalEndpoints(t *testing.T) {
	nodePort := func(name string, etp, itp bool, ip string) model.ServicePort {
		sp := svc(name, ip)
		sp.NodePort, sp.ExternalPolicyLocal, sp.InternalPolicyLocal = 30080, etp, itp
		return sp
	}
	twoPorts := func(name string) []model.ServicePort {
		a, b := nodePort(name, true, false, "10.96.0.20"), nodePort(name, true, false, "10.96.0.20")
		b.Name.Port, b.Port, b.NodePort = "metrics", 9090, 30090
		return []model.ServicePort{a, b}
	}
	lb := nodePort("lb", true, false, "10.96.0.30")
	lb.NodePort, lb.LoadBalancerIPs, lb.HealthCheckNodePort = 0, []netip.Addr{addr("192.0.2.30")}, 32000
	extIP := svc("ext", "10.96.0.40")
	extIP.ExternalIPs, extIP.ExternalPolicyLocal = []netip.Addr{addr("192.0.2.40")}, true
	elsewhere := []model.Endpoint{ready("10.244.2.5", 8080, "n2")}
	for _, tc := range []struct {
		name  string
		ports []model.ServicePort
		eps   []model.Endpoint
		o     Options
		want  [2]NoLocal
	}{
		// A NodePort Service (no healthCheckNodePort) with the Local
		// external policy and its endpoints on another node.
		{"NodePort, endpoints elsewhere", []model.ServicePort{nodePort("np", true, false, "10.96.0.10")}, elsewhere, opts(), [2]NoLocal{{External: 1}}},
		{"NodePort, a local endpoint", []model.ServicePort{nodePort("np", true, false, "10.96.0.10")},
			append([]model.Endpoint{ready("10.244.1.5", 8080, "n1")}, elsewhere...), opts(), [2]NoLocal{}},
		// No endpoint anywhere: kube-proxy does not count it (hasAnyEndpoints).
		{"NodePort, no endpoint", []model.ServicePort{nodePort("np", true, false, "10.96.0.10")}, nil, opts(), [2]NoLocal{}},
		{"NodePort, only a not-ready endpoint elsewhere", []model.ServicePort{nodePort("np", true, false, "10.96.0.10")},
			[]model.Endpoint{terminating("10.244.2.5", 8080, "n2", false)}, opts(), [2]NoLocal{}},
		// A serving terminating endpoint elsewhere is one kube-proxy uses.
		{"NodePort, serving terminating elsewhere", []model.ServicePort{nodePort("np", true, false, "10.96.0.10")},
			[]model.Endpoint{terminating("10.244.2.5", 8080, "n2", true)}, opts(), [2]NoLocal{{External: 1}}},
		// A local endpoint that is only serving and terminating is used.
		{"NodePort, local serving terminating", []model.ServicePort{nodePort("np", true, false, "10.96.0.10")},
			append([]model.Endpoint{terminating("10.244.1.5", 8080, "n1", true)}, elsewhere...), opts(), [2]NoLocal{}},
		{"ClusterIP, internal Local", []model.ServicePort{nodePort("cip", false, true, "10.96.0.11")}, elsewhere, opts(), [2]NoLocal{{Internal: 1}}},
		// Both Local: the ClusterIP's virtual server counts the Service
		// under both labels, as kube-proxy's syncEndpoint.
		{"both Local", []model.ServicePort{nodePort("both", true, true, "10.96.0.12")}, elsewhere, opts(), [2]NoLocal{{Internal: 1, External: 1}}},
		{"Cluster policies", []model.ServicePort{nodePort("np", false, false, "10.96.0.10")}, elsewhere, opts(), [2]NoLocal{}},
		// Two ports, one Service.
		{"two ports", twoPorts("two"), elsewhere, opts(), [2]NoLocal{{External: 1}}},
		{"LoadBalancer without node ports", []model.ServicePort{lb}, elsewhere, opts(), [2]NoLocal{{External: 1}}},
		{"externalIP", []model.ServicePort{extIP}, elsewhere, opts(), [2]NoLocal{{External: 1}}},
		{"IPv6", []model.ServicePort{nodePort("v6", true, false, "fd00:96::10")}, []model.Endpoint{ready("fd00:244:2::5", 8080, "n2")},
			dualOpts(), [2]NoLocal{{}, {External: 1}}},
		// An IPv6 endpoint says nothing of the IPv4 virtual servers.
		{"IPv4 Service, IPv6 endpoint elsewhere", []model.ServicePort{nodePort("np", true, false, "10.96.0.10")},
			[]model.Endpoint{ready("fd00:244:2::5", 8080, "n2")}, dualOpts(), [2]NoLocal{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inc := NewIncremental(tc.o, testNodes, nil)
			key := tc.ports[0].Name.NamespacedName
			eps := map[model.ServicePortName][]model.Endpoint{}
			for _, sp := range tc.ports {
				eps[sp.Name] = tc.eps
			}
			inc.Update(key, tc.ports, eps, nil)
			if got := inc.NoLocalEndpoints(); got != tc.want {
				t.Errorf("NoLocalEndpoints() = %+v, want %+v", got, tc.want)
			}
			// Another Service counted, then both removed: the counts follow.
			other := types.NamespacedName{Namespace: "default", Name: "zz-other"}
			op := nodePort("zz-other", true, true, "10.96.0.99")
			op.Name.NamespacedName = other
			inc.Update(other, []model.ServicePort{op}, map[model.ServicePortName][]model.Endpoint{op.Name: elsewhere}, nil)
			want := tc.want
			want[0].Internal++
			want[0].External++
			if got := inc.NoLocalEndpoints(); got != want {
				t.Errorf("with %s: NoLocalEndpoints() = %+v, want %+v", other, got, want)
			}
			inc.Update(key, nil, nil, nil)
			inc.Update(other, nil, nil, nil)
			if got := inc.NoLocalEndpoints(); got != ([2]NoLocal{}) {
				t.Errorf("after removing both: NoLocalEndpoints() = %+v, want none", got)
			}
		})
	}
}

// TestNoLocalEndpointsKubeProxyCases: the cases of kube-proxy 1.34's
// TestNoEndpointsMetric (pkg/proxy/ipvs/proxier_test.go), with their
// expected internal and external counts: svc1 on port 80, NodePort 30000
// when externalTrafficPolicy is set, three ready endpoints.
func TestNoLocalEndpointsKubeProxyCases(t *testing.T) {
	local := []model.Endpoint{ready("10.0.1.1", 80, "n1"), ready("10.0.1.2", 80, "node1"), ready("10.0.1.3", 80, "node2")}
	remote := []model.Endpoint{ready("10.0.1.1", 80, "node0"), ready("10.0.1.2", 80, "node1"), ready("10.0.1.3", 80, "node2")}
	for _, tc := range []struct {
		name     string
		itp, etp bool
		eps      []model.Endpoint
		want     NoLocal
	}{
		{"internalTrafficPolicy is set and there are local endpoints", true, false, local, NoLocal{}},
		{"externalTrafficPolicy is set and there are local endpoints", false, true, local, NoLocal{}},
		{"both policies are set and there are local endpoints", true, true, local, NoLocal{}},
		{"internalTrafficPolicy is set and there are no local endpoints", true, false, remote, NoLocal{Internal: 1}},
		{"externalTrafficPolicy is set and there are no local endpoints", false, true, remote, NoLocal{External: 1}},
		{"Both policies are set and there are no local endpoints", true, true, remote, NoLocal{Internal: 1, External: 1}},
		{"Both policies are set and there are no endpoints at all", true, true, nil, NoLocal{}},
	} {
		sp := model.ServicePort{Name: model.ServicePortName{NamespacedName: types.NamespacedName{Namespace: "ns1", Name: "svc1"}, Port: "p80"},
			Protocol: model.TCP, Port: 80, ClusterIPs: []netip.Addr{addr("172.20.1.1")}, InternalPolicyLocal: tc.itp, ExternalPolicyLocal: tc.etp}
		if tc.etp {
			sp.NodePort = 30000
		}
		inc := NewIncremental(opts(), testNodes, nil)
		inc.Update(sp.Name.NamespacedName, []model.ServicePort{sp}, map[model.ServicePortName][]model.Endpoint{sp.Name: tc.eps}, nil)
		if got := inc.NoLocalEndpoints(); got != [2]NoLocal{tc.want} {
			t.Errorf("%s: %+v, want %+v", tc.name, got, [2]NoLocal{tc.want})
		}
	}
}
