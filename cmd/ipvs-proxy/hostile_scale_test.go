package main

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/convert"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
)

// hostileWide is issue 37's hostile object: one Service of 10,000 ports
// and the slice the EndpointSlice controller writes for 100 pods, 1,000,000
// real servers on every node uncapped.
func hostileWide() (*corev1.Service, *discoveryv1.EndpointSlice) {
	const ports, pods = 10_000, 100
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "wide"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.60", ClusterIPs: []string{"10.96.0.60"}}}
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "wide-1",
		Labels: map[string]string{discoveryv1.LabelServiceName: "wide"}}, AddressType: discoveryv1.AddressTypeIPv4}
	for i := range ports {
		name := fmt.Sprintf("p%05d", i)
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: name, Port: int32(1 + i), Protocol: corev1.ProtocolTCP})
		slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{Name: ptr.To(name), Port: ptr.To(int32(20000 + i)), Protocol: ptr.To(corev1.ProtocolTCP)})
	}
	for i := range pods {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.244.%d.%d", i/200, 1+i%200)}})
	}
	return svc, slice
}

// TestHostileRealServersBounded: with the default cap, the conversion and
// plan of the hostile object plan no more than the cap, refuse the rest
// with the counts, and stay bounded in memory (uncapped they built a
// million endpoints and real servers: some 300 MB).
func TestHostileRealServersBounded(t *testing.T) {
	svc, slice := hostileWide()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	c := convert.Converter{}.Convert([]*corev1.Service{svc}, []*discoveryv1.EndpointSlice{slice}, nil)
	st := planner.Plan(c, planner.Options{NodeName: "n1", LocalAddrs: []netip.Addr{netip.MustParseAddr("10.10.0.211")}})
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	rs := 0
	for _, vs := range st.VirtualServers {
		rs += len(vs.RealServers)
	}
	if rs > convert.DefaultMaxRealServers || rs == 0 {
		t.Errorf("%d real servers planned, want 1 to %d", rs, convert.DefaultMaxRealServers)
	}
	var capped *model.Refusal
	for i, r := range st.Refusals {
		if r.Reason == model.ReasonTooManyRealServers {
			capped = &st.Refusals[i]
		}
	}
	if capped == nil {
		t.Fatal("no TooManyRealServers refusal")
	}
	t.Logf("%d real servers, %s, %.1f MiB allocated; %s", rs, took, float64(after.TotalAlloc-before.TotalAlloc)/(1<<20), capped.Message)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 128<<20 {
		t.Errorf("converting and planning the hostile object allocated %d MiB, want at most 128", alloc>>20)
	}
}
