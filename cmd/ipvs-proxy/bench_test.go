package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// hugeService is the largest hostile Service issue 14 names: 60,000
// externalIPs × 100 ports, about 970 KB of JSON, which the API server
// accepts. Uncapped it asks every node for 6,000,000 virtual servers.
func hugeService(tb testing.TB) []byte {
	tb.Helper()
	b := wideServiceJSON(tb, 60000, 100)
	if len(b) < 900_000 || len(b) > 1_000_000 {
		tb.Fatalf("the Service is %d bytes, want about 970 KB", len(b))
	}
	return b
}

// wideServiceJSON is a Service with addrs externalIPs and ports ports, as
// JSON.
func wideServiceJSON(tb testing.TB, addrs, ports int) []byte {
	tb.Helper()
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "evil", Name: "huge"},
		Spec:       corev1.ServiceSpec{ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"}},
	}
	for i := range ports {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: fmt.Sprintf("p%d", i), Port: int32(1000 + i), Protocol: corev1.ProtocolTCP})
	}
	for i := range addrs {
		svc.Spec.ExternalIPs = append(svc.Spec.ExternalIPs, fmt.Sprintf("100.%d.%d.%d", 64+i/65536, i/256%256, i%256))
	}
	b, err := json.Marshal(svc)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// benchPlan runs `ipvs-proxy plan -f - --node-name n1 --node-ip
// 10.10.0.211 [extra...]` on in for every iteration of b and returns the
// last output.
func benchPlan(b *testing.B, in []byte, extra ...string) string {
	b.Helper()
	args := append([]string{"plan", "-f", "-", "--node-name", "n1", "--node-ip", "10.10.0.211"}, extra...)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	var out, errOut bytes.Buffer
	for b.Loop() {
		out.Reset()
		errOut.Reset()
		if code := Main(args, bytes.NewReader(in), &out, &errOut); code != exitOK {
			b.Fatalf("exit %d: %s", code, errOut.String())
		}
	}
	return out.String()
}

// BenchmarkPlanHugeService is `ipvs-proxy plan` of hugeService, from
// reading the JSON to the text output, with the default
// --max-virtual-servers-per-service (1,000): 10 externalIPs × 100 ports are
// planned, the other 59,990 addresses refused in one line.
//
//	go test -run '^$' -bench PlanHugeService -benchmem ./cmd/ipvs-proxy/
func BenchmarkPlanHugeService(b *testing.B) {
	out := benchPlan(b, hugeService(b))
	ipvsSection, _, _ := strings.Cut(out, "# kube-ipvs0\n")
	if n := strings.Count(ipvsSection, "\n-A "); n != 100+10*100 {
		b.Fatalf("%d virtual servers planned, want 1,100 (100 cluster IP, 1,000 externalIP)", n)
	}
	if !strings.Contains(out, "59990 of 60000 externalIPs not served") {
		b.Fatal("no refusal of the excess")
	}
}

// BenchmarkPlanWideService is `ipvs-proxy plan` of the other
// Service, 20,000 externalIPs × 20 ports (310 KB, 400,000 virtual servers
// uncapped), with the default cap and with the cap raised above it.
//
//	go test -run '^$' -bench PlanWideService -benchmem ./cmd/ipvs-proxy/
func BenchmarkPlanWideService(b *testing.B) {
	in := wideServiceJSON(b, 20000, 20)
	for _, bc := range []struct {
		name string
		args []string
	}{
		{"default-cap", nil},
		{"uncapped", []string{"--max-virtual-servers-per-service", "400000"}},
	} {
		b.Run(bc.name, func(b *testing.B) { benchPlan(b, in, bc.args...) })
	}
}

// clusterJSON is a v1 List as the end-to-end checks feed `plan -f`:
// services ClusterIP Services with one port, each with one EndpointSlice
// of endpoints ready addresses, and the Node n1.
func clusterJSON(tb testing.TB, services, endpoints int) []byte {
	tb.Helper()
	items := []any{&corev1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status:     corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.10.0.211"}}},
	}}
	ready := true
	for i := range services {
		name := fmt.Sprintf("s%05d", i)
		ip := fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)
		items = append(items, &corev1.Service{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: name},
			Spec: corev1.ServiceSpec{ClusterIP: ip, ClusterIPs: []string{ip},
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080)}}},
		})
		sl := &discoveryv1.EndpointSlice{
			TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: name + "-1",
				Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
		}
		for e := range endpoints {
			n := i*endpoints + e
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{
				Addresses:  []string{fmt.Sprintf("10.244.%d.%d", n/250, n%250+1)},
				Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			})
		}
		items = append(items, sl)
	}
	b, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// BenchmarkPlanCluster is `ipvs-proxy plan` of a cluster as the end-to-end
// checks read it back from the API server (10,000 Services × 10 endpoints:
// about 11 MB of JSON), from reading the List to the text output: the
// reference side of every kernel-against-plan comparison.
//
//	go test -run '^$' -bench PlanCluster -benchmem ./cmd/ipvs-proxy/
func BenchmarkPlanCluster(b *testing.B) {
	out := benchPlan(b, clusterJSON(b, 10000, 10))
	ipvsSection, _, _ := strings.Cut(out, "# kube-ipvs0\n")
	if n := strings.Count(ipvsSection, "\n-A "); n != 10000 {
		b.Fatalf("%d virtual servers planned, want 10,000", n)
	}
}
