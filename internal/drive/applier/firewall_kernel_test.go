//go:build kernel

package applier

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/convert"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// lbService is a dual-stack LoadBalancer Service with the given source
// ranges, its LoadBalancer IPs the fams' lbIP, backed by pod-a.
func lbService(name, clusterV4, clusterV6 string, ranges []string) (*corev1.Service, []*discoveryv1.EndpointSlice) {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.ServiceSpec{
			Type:                     corev1.ServiceTypeLoadBalancer,
			ClusterIP:                clusterV4,
			ClusterIPs:               []string{clusterV4, clusterV6},
			LoadBalancerSourceRanges: ranges,
			Ports:                    []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}},
		},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{
			{IP: v4.lbIP.String()}, {IP: v6.lbIP.String()},
		}}},
	}
	var slices []*discoveryv1.EndpointSlice
	for _, f := range fams {
		at := discoveryv1.AddressTypeIPv4
		if f.podA.Is6() {
			at = discoveryv1.AddressTypeIPv6
		}
		slices = append(slices, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: name + "-" + string(at), Labels: map[string]string{convert.LabelServiceName: name}},
			AddressType: at,
			Ports:       []discoveryv1.EndpointPort{{Port: ptr.To(int32(ktest.BackendPort)), Protocol: ptr.To(corev1.ProtocolTCP)}},
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{f.podA.String()}, NodeName: ptr.To(thisNode)}},
		})
	}
	return svc, slices
}

// TestKernelSourceRangesFailClosed sends real traffic to LoadBalancer IPs
// whose loadBalancerSourceRanges are of the other family only, or written
// IPv4-mapped, converted and planned as `run` does: an IP left without a
// range of its own family drops every source (before the fix it answered
// everyone), and an IPv4-mapped range admits its IPv4 clients.
func TestKernelSourceRangesFailClosed(t *testing.T) {
	for _, tt := range []struct {
		name   string
		ranges []string
		// open[f] is whether client A reaches the IP of family f; client
		// B never does.
		open [2]bool
		// refusals: the closed IP's, and the mapped range's.
		refusals int
	}{
		{"only an IPv6 range: the IPv4 LoadBalancer IP admits nobody", []string{v6.lbAllowed.String()}, [2]bool{false, true}, 1},
		{"an IPv4-mapped range admits its IPv4 client; no IPv6 range: IPv6 closed", []string{"::ffff:" + v4.cliA.String() + "/128"}, [2]bool{true, false}, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := newKBed(t)
			p := b.open(ipvs.Options{})
			svc, eps := lbService("lb", v4.lb.String(), v6.lb.String(), tt.ranges)
			c := convert.Convert([]*corev1.Service{svc}, eps, nil)
			c.Nodes = testCluster().Nodes
			st := b.plan(c)
			if len(st.Refusals) != tt.refusals {
				t.Errorf("refusals %v, want %d", st.Refusals, tt.refusals)
			}
			b.full(p, st)
			b.checkPlan(st)
			for i, f := range fams {
				to := ap(f.lbIP, 80)
				out, err := b.cliA.Request(ktest.TCP, to)
				switch {
				case tt.open[i] && err != nil:
					t.Errorf("%s from client A (inside the range): %v", to, err)
				case !tt.open[i] && err == nil:
					t.Errorf("%s from client A: answered %q, want dropped (no %s range: fail closed)", to, out, f.name)
				}
				if out, err := b.cliB.Request(ktest.TCP, to); err == nil {
					t.Errorf("%s from client B (outside every range): answered %q", to, out)
				}
			}
			for _, r := range st.Refusals {
				if r.Reason != model.ReasonInvalidSourceRange && r.Reason != model.ReasonIPv4Mapped {
					t.Errorf("unexpected refusal %v", r)
				}
			}
		})
	}
}
