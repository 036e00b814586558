package main

import (
	"fmt"
	"math/rand"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/convert"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/nodeplan"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/manifest"
	"github.com/ipvs-proxy/ipvs-proxy/ipvs"
)

// propertyPool is what generated objects draw addresses from: ClusterIPs,
// node addresses, pod addresses, cloud platform addresses, junk, and the
// forms a Node's entry may take.
var propertyPool = []string{
	"10.96.0.1", "10.96.0.10", "10.96.0.11", "10.96.0.12", "10.10.0.211", "10.10.0.212", "10.244.1.5", "10.244.2.5",
	"198.51.100.7", "198.51.100.8", "168.63.129.16", "100.100.100.200", "0.0.0.0", "127.0.0.1", "169.254.169.254",
	"10.96.0.10/24", " 10.96.0.1", "010.096.000.010", "::ffff:10.96.0.11", "10.96.0.0/12", "192.0.2.53",
}

// propertyCluster generates Nodes, Services and EndpointSlices: a
// compromised kubelet's Node claiming anything of the pool, tenants'
// Services claiming each other's addresses, hand-written slices.
func propertyCluster(r *rand.Rand) ([]*corev1.Service, []*discoveryv1.EndpointSlice, []*corev1.Node) {
	pick := func() string { return propertyPool[r.Intn(len(propertyPool))] }
	var nodes []*corev1.Node
	for i := range 1 + r.Intn(3) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%d", i+1)}}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.10.0.%d", 211+i)}}
		for range r.Intn(4) {
			n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: pick()})
		}
		if r.Intn(2) == 0 {
			n.Spec.PodCIDRs = []string{[]string{"10.244.1.0/24", "10.96.0.0/24", "0.0.0.0/0", "10.244.2.0/24"}[r.Intn(4)]}
		}
		nodes = append(nodes, n)
	}
	var svcs []*corev1.Service
	var slices []*discoveryv1.EndpointSlice
	for i := range 1 + r.Intn(4) {
		name := fmt.Sprintf("s%d", i)
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: name,
			CreationTimestamp: metav1.NewTime(time.Date(2025, 1, 1+r.Intn(5), 0, 0, 0, 0, time.UTC))},
			Spec: corev1.ServiceSpec{ClusterIP: fmt.Sprintf("10.96.0.%d", []int{1, 10, 11, 12}[i]), Ports: []corev1.ServicePort{{Name: "p", Port: []int32{80, 53}[r.Intn(2)], Protocol: corev1.ProtocolTCP}}}}
		for range r.Intn(3) {
			svc.Spec.ExternalIPs = append(svc.Spec.ExternalIPs, pick())
		}
		if r.Intn(2) == 0 {
			// A LoadBalancer IP its controller wrote: shared, a node's
			// (k3s' servicelb), another Service's address.
			svc.Spec.Type = corev1.ServiceTypeLoadBalancer
			svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: pick()}}
		}
		svcs = append(svcs, svc)
		s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{{Name: ptr.To("p"), Port: ptr.To(int32(8080)), Protocol: ptr.To(corev1.ProtocolTCP)}}}
		for range 1 + r.Intn(3) {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{pick()}})
		}
		slices = append(slices, s)
	}
	return svcs, slices, nodes
}

// propertyPlan plans as `plan` does: converted, the Nodes through the
// trust order, for node n1.
func propertyPlan(svcs []*corev1.Service, eps []*discoveryv1.EndpointSlice, nodes []*corev1.Node) planner.State {
	o := planner.Options{NodeName: "n1", LocalAddrs: []netip.Addr{netip.MustParseAddr("10.10.0.211")}}
	res, err := nodeplan.Plan(nodeplan.Input{Objects: &manifest.Objects{Services: svcs, EndpointSlices: eps, Nodes: nodes}, Options: o})
	if err != nil {
		panic(err) // a node name is given: Plan has nothing to refuse
	}
	return res.State
}

// TestGuardProperties is issue 37's property test over generated Nodes,
// Services and EndpointSlices: no Node object, however written,
// unprograms a Service's ClusterIP; no Service takes an address another
// Service had first, nor by an externalIP another Service's ClusterIP or
// LoadBalancer IP; no endpoint is a Service VIP (a ClusterIP, an address
// bound on kube-ipvs0) or a cloud platform address.
func TestGuardProperties(t *testing.T) {
	platform := guard.PlatformAddrs()
	for seed := int64(1); seed <= 500; seed++ {
		r := rand.New(rand.NewSource(seed))
		svcs, eps, nodes := propertyCluster(r)
		st := propertyPlan(svcs, eps, nodes)
		// 1. The same plan with only this node's own Node: every ClusterIP
		// virtual server stays.
		bare := propertyPlan(svcs, eps, []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.10.0.211"}}}}})
		clusterIPs := convert.ServiceIPs(svcs)
		for _, vs := range bare.VirtualServers {
			if !clusterIPs.Contains(vs.Address) {
				continue
			}
			if !slices.ContainsFunc(st.VirtualServers, func(w ipvs.VirtualServer) bool { return w.Key == vs.Key }) {
				t.Fatalf("seed %d: the Nodes unprogrammed ClusterIP %s:%d of %s; refusals: %v", seed, vs.Address, vs.Port, vs.Service, st.Refusals)
			}
		}
		// 2. An externalIP virtual server is its oldest claimant's, on an
		// address no other Service has as its ClusterIP or LoadBalancer IP.
		created := map[string]time.Time{}
		for _, s := range svcs {
			created[s.Name] = s.CreationTimestamp.Time
		}
		lbIPs := func(svc *corev1.Service) convert.AddrSet {
			return convert.LoadBalancerIPs([]*corev1.Service{svc})
		}
		byName := map[string]*corev1.Service{}
		for _, s := range svcs {
			byName[s.Name] = s
		}
		for _, vs := range st.VirtualServers {
			if clusterIPs.Contains(vs.Address) || vs.Address.String() == "10.10.0.211" || lbIPs(byName[vs.Service.Name]).Contains(vs.Address) {
				continue
			}
			for _, s := range svcs {
				if s.Name != vs.Service.Name && (lbIPs(s).Contains(vs.Address) || convert.ServiceIPs([]*corev1.Service{s}).Contains(vs.Address)) {
					t.Fatalf("seed %d: %s has the externalIP %s, %s's ClusterIP or LoadBalancer IP", seed, vs.Service, vs.Address, s.Name)
				}
			}
			for _, s := range svcs {
				if s.Name != vs.Service.Name && slices.Contains(s.Spec.ExternalIPs, vs.Address.String()) && s.Spec.Ports[0].Port == int32(vs.Port) && created[s.Name].Before(created[vs.Service.Name]) {
					t.Fatalf("seed %d: %s took %s from the older %s", seed, vs.Service, vs.Address, s.Name)
				}
			}
		}
		// 3. No real server is a ClusterIP, a bound VIP or a platform
		// address.
		for _, vs := range st.VirtualServers {
			for _, rs := range vs.RealServers {
				if clusterIPs.Contains(rs.Address) || slices.Contains(st.Addresses, netip.PrefixFrom(rs.Address, rs.Address.BitLen())) || slices.Contains(platform, rs.Address) {
					t.Fatalf("seed %d: %s has real server %s", seed, vs.Service, rs.Address)
				}
			}
		}
	}
}
