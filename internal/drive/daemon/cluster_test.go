package daemon

import (
	"context"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/informers"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
)

func apiService(ns, name, vip string, externalIPs ...string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: vip, ClusterIPs: []string{vip}, ExternalIPs: externalIPs,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}, {Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}}},
	}
}

func apiSlice(ns, svc, name string, addrs ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(8080)), Protocol: ptr.To(corev1.ProtocolTCP)},
			{Name: ptr.To("dns"), Port: ptr.To(int32(5353)), Protocol: ptr.To(corev1.ProtocolUDP)}},
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}})
	}
	return s
}

// TestIncrementalPlanEqualsPlan: the loop's plan, after a full sync and
// after partial ones that update only the changed services, is exactly
// what `plan` computes from the whole cache (planner.Plan of
// convert.Convert through Watcher.Cluster).
func TestIncrementalPlanEqualsPlan(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(
		// "a-b/x" sorts before "a/z" as a key but after it as (namespace, name).
		apiService("a", "z", "10.96.0.1"), apiService("a-b", "x", "10.96.0.2", "not-an-ip"),
		apiSlice("a", "z", "z-1", "10.244.0.1", "10.244.0.2"), apiSlice("a-b", "x", "x-1", "10.244.0.3", "bad"),
		apiSlice("a", "gone", "gone-1", "10.244.0.9"),
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.0.1"}}}},
	)
	w, err := informers.NewWatcher(client, "n1", nil, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Start(ctx)
	if !w.WaitForCacheSync(ctx) {
		t.Fatal("no cache sync")
	}
	l := &Loop{Source: w, Applier: nopApplier{}, Options: testOpts}
	l.defaults()
	check := func(what string, full bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for w.Pending() == 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond) // let the rest of a burst arrive
		ch := w.TakeChanges()
		var nodes nodeInputs
		if full {
			nodes.nodes, nodes.refusals = w.Nodes()
		}
		got, _, err := l.apply(&SyncReport{Full: full, Replanned: full, Services: ch.Services}, testOpts, nodes, nil)
		if err != nil {
			t.Fatal(err)
		}
		c := w.Cluster()
		if len(c.Services) == 0 {
			t.Fatalf("%s: empty cluster", what)
		}
		if want := planner.Plan(c, testOpts); !reflect.DeepEqual(*got, want) {
			t.Fatalf("%s: incremental plan differs from Plan:\n got %+v\nwant %+v", what, *got, want)
		}
	}
	check("full", true)
	if _, err := client.DiscoveryV1().EndpointSlices("a").Update(ctx, apiSlice("a", "z", "z-1", "10.244.0.5"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	check("slice update", false)
	if _, err := client.CoreV1().Services("a").Create(ctx, apiService("a", "gone", "10.96.0.3", "192.168.0.1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	check("service create", false)
	if err := client.CoreV1().Services("a-b").Delete(ctx, "x", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	check("service delete", false)
}
