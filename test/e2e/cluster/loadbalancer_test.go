package cluster_test

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/cluster"
)

// TestLBPool: each Service keeps its address, a released one is handed
// out again, and an exhausted pool says so.
func TestLBPool(t *testing.T) {
	p := cluster.NewLBPool(netip.MustParseAddr("192.168.60.200"), netip.MustParseAddr("192.168.60.201"))
	a, b, c := types.NamespacedName{Namespace: "n", Name: "a"}, types.NamespacedName{Namespace: "n", Name: "b"}, types.NamespacedName{Namespace: "n", Name: "c"}
	must := func(svc types.NamespacedName, want string) {
		t.Helper()
		got, err := p.Assign(svc)
		if err != nil || got != netip.MustParseAddr(want) {
			t.Fatalf("Assign(%s) = %v, %v; want %s", svc, got, err, want)
		}
	}
	must(a, "192.168.60.200")
	must(b, "192.168.60.201")
	must(a, "192.168.60.200")
	if _, err := p.Assign(c); !errors.Is(err, cluster.ErrLBPoolExhausted) {
		t.Fatalf("Assign(%s) on a full pool: %v, want ErrLBPoolExhausted", c, err)
	}
	if got, ok := p.Release(a); !ok || got != netip.MustParseAddr("192.168.60.200") {
		t.Fatalf("Release(%s) = %v, %v", a, got, ok)
	}
	if _, ok := p.Release(a); ok {
		t.Fatalf("Release(%s) twice: released again", a)
	}
	must(c, "192.168.60.200")
	got := p.Assigned()
	slices.SortFunc(got, func(x, y types.NamespacedName) int { return strings.Compare(x.String(), y.String()) })
	if !slices.Equal(got, []types.NamespacedName{b, c}) {
		t.Fatalf("Assigned() = %v, want [%s %s]", got, b, c)
	}
}

// TestLBHealthPort: Local checks the Service's health check node port,
// Cluster the proxy's own /healthz; a class names another controller.
func TestLBHealthPort(t *testing.T) {
	svc := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
		ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, HealthCheckNodePort: 31000}}
	if got := cluster.LBHealthPort(svc); got != 31000 {
		t.Errorf("Local: %d, want the health check node port 31000", got)
	}
	svc.Spec.ExternalTrafficPolicy, svc.Spec.HealthCheckNodePort = corev1.ServiceExternalTrafficPolicyCluster, 0
	if got := cluster.LBHealthPort(svc); got != cluster.ProxyHealthzPort {
		t.Errorf("Cluster: %d, want the proxy's %d", got, cluster.ProxyHealthzPort)
	}
	if !cluster.CloudManages(svc) {
		t.Errorf("a LoadBalancer Service without a class is not the cloud's")
	}
	svc.Spec.LoadBalancerClass = ptr.To("example.com/other")
	if cluster.CloudManages(svc) {
		t.Errorf("a LoadBalancer Service of class %s is the cloud's", *svc.Spec.LoadBalancerClass)
	}
}

// TestLBTargets: only the passing nodes, in node order; all when none
// passes.
func TestLBTargets(t *testing.T) {
	a, b, c := netip.MustParseAddr("192.168.50.11"), netip.MustParseAddr("192.168.50.12"), netip.MustParseAddr("192.168.50.13")
	nodes := []netip.Addr{a, b, c}
	for _, tc := range []struct {
		passing map[netip.Addr]bool
		want    []netip.Addr
	}{
		{map[netip.Addr]bool{c: true, a: true}, []netip.Addr{a, c}},
		{map[netip.Addr]bool{b: true}, []netip.Addr{b}},
		{map[netip.Addr]bool{}, nodes},
	} {
		if got := cluster.LBTargets(nodes, tc.passing); !slices.Equal(got, tc.want) {
			t.Errorf("LBTargets(%v) = %v, want %v", tc.passing, got, tc.want)
		}
	}
}
