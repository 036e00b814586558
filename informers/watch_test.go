package informers

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func testService(name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
}

func testSlice(svc, name string, trigger string, addrs ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(8080)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	if trigger != "" {
		s.Annotations = map[string]string{AnnotationTriggerTime: trigger}
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}})
	}
	return s
}

func testNode(name string, addrs ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"topology.kubernetes.io/zone": "a"}}}
	for _, a := range addrs {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
	}
	return n
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestProxySelector(t *testing.T) {
	if got := ProxySelector().String(); got != "!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name" {
		t.Errorf("selector %q", got)
	}
}

func TestWatcher(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	client := fake.NewClientset(testService("web"), testSlice("web", "web-1", "", "10.244.1.5"), testNode("a", "192.168.0.1"), testNode("b", "192.168.0.2"))
	cacheFile := NewNodeAddressCache(dir, DefaultDeletedNodeGrace)
	w, err := NewWatcher(client, "a", cacheFile, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	var local []*corev1.Node
	w.OnLocalNode = func(n *corev1.Node) { local = append(local, n) }
	w.Start(ctx)
	if !w.WaitForCacheSync(ctx) {
		t.Fatal("caches did not sync")
	}
	waitFor(t, "initial changes", func() bool { return w.Pending() == 1 })
	c := w.TakeChanges()
	if !reflect.DeepEqual(c.Services, []types.NamespacedName{web}) || !c.Nodes {
		t.Errorf("initial changes %+v", c)
	}
	ports, eps, _ := w.Service(web)
	if len(ports) != 1 || len(eps[ports[0].Name]) != 1 {
		t.Fatalf("service web: %v %v", ports, eps)
	}
	if got := w.Cluster(); len(got.Services) != 1 || len(got.Nodes) != 2 {
		t.Errorf("cluster %+v", got)
	}
	if len(local) == 0 || local[0].Name != "a" {
		t.Errorf("local node callbacks: %v", local)
	}

	// The Node handler runs after the caches synced, maybe after the
	// Service handler: wait for the file rather than race it.
	var na NodeAddresses
	waitFor(t, "the node address cache file", func() bool {
		var err error
		na, err = ReadNodeAddresses(dir)
		return err == nil && len(na.Nodes) == 2
	})
	if want := map[string][]netip.Addr{"a": {netip.MustParseAddr("192.168.0.1")}, "b": {netip.MustParseAddr("192.168.0.2")}}; !reflect.DeepEqual(na.Nodes, want) {
		t.Errorf("cache file %v", na.Nodes)
	}

	// A slice change marks its service and records the trigger time.
	trig := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if _, err := client.DiscoveryV1().EndpointSlices("default").Update(ctx, testSlice("web", "web-1", trig.Format(time.RFC3339), "10.244.1.5", "10.244.2.5"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.Notify():
	case <-time.After(5 * time.Second):
		t.Fatal("no notification")
	}
	waitFor(t, "slice change", func() bool { return w.Pending() == 1 })
	c = w.TakeChanges()
	if !reflect.DeepEqual(c.Services, []types.NamespacedName{web}) || c.Nodes || !c.Triggers[web].Equal(trig) {
		t.Errorf("slice change %+v", c)
	}

	// A node heartbeat (no address or label change) is not a change; an
	// address change is, and rewrites the cache file.
	before, _ := os.Stat(filepath.Join(dir, NodeAddressFile))
	hb := testNode("b", "192.168.0.2")
	hb.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if _, err := client.CoreV1().Nodes().Update(ctx, hb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Services("default").Create(ctx, testService("other"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "service create", func() bool { return w.Pending() == 1 })
	if c := w.TakeChanges(); c.Nodes {
		t.Errorf("a heartbeat counted as a node change: %+v", c)
	}
	after, _ := os.Stat(filepath.Join(dir, NodeAddressFile))
	if !after.ModTime().Equal(before.ModTime()) {
		t.Error("a heartbeat rewrote the cache file")
	}
	if _, err := client.CoreV1().Nodes().Update(ctx, testNode("b", "192.168.0.2", "192.168.0.22"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "node change", func() bool {
		na, _ := ReadNodeAddresses(dir)
		return len(na.Nodes["b"]) == 2
	})
	if c := w.TakeChanges(); !c.Nodes {
		t.Errorf("address change not a node change: %+v", c)
	}
	// This node's pod CIDRs decide the rules (the Local policy's fallback).
	a := testNode("a", "192.168.0.1")
	a.Spec.PodCIDRs = []string{"10.244.1.0/24"}
	if _, err := client.CoreV1().Nodes().Update(ctx, a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "this node's pod CIDR change as a node change", func() bool { return w.TakeChanges().Nodes })
	if err := client.CoreV1().Nodes().Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// A deleted Node is remembered, with when it was last seen, and still
	// protected (issue 14, item 4).
	waitFor(t, "node delete", func() bool {
		na, _ := ReadNodeAddresses(dir)
		_, ok := na.LastSeen["b"]
		return ok && len(na.Nodes["b"]) == 2
	})
	if nodes, _ := w.Nodes(); len(nodes) != 2 || nodes[1].Name != "b" || nodes[1].LastSeen.IsZero() {
		t.Errorf("Nodes after b's deletion: %+v", nodes)
	}

	// Service deletion: the key is dirty and Service gives nothing.
	if err := client.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "service delete", func() bool { return w.Pending() == 1 })
	if ports, _, _ := w.Service(web); len(ports) != 0 {
		t.Errorf("deleted service still has ports")
	}
	w.Requeue([]types.NamespacedName{{Namespace: "x", Name: "y"}})
	if got := w.TakeChanges().Services; !reflect.DeepEqual(got, []types.NamespacedName{web, {Namespace: "x", Name: "y"}}) {
		t.Errorf("requeue: %v", got)
	}
}

func TestReadNodeAddressesMissing(t *testing.T) {
	if _, err := ReadNodeAddresses(t.TempDir()); !errors.Is(err, ErrNoCache) {
		t.Errorf("missing cache: %v", err)
	}
}

// web is the test Service default/web.
var web = types.NamespacedName{Namespace: "default", Name: "web"}

// TestWatcherSliceIndex: the Watcher's own index of EndpointSlices by
// Service follows additions, a slice moved to another Service (both marked
// changed), a second slice and deletions.
func TestWatcherSliceIndex(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(testService("web"), testService("api"), testSlice("web", "web-1", "", "10.244.1.5"))
	w, err := NewWatcher(client, "a", nil, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Start(ctx)
	if !w.WaitForCacheSync(ctx) {
		t.Fatal("caches did not sync")
	}
	api := types.NamespacedName{Namespace: "default", Name: "api"}
	endpoints := func(svc types.NamespacedName) []string {
		ports, eps, _ := w.Service(svc)
		var out []string
		for _, p := range ports {
			for _, e := range eps[p.Name] {
				out = append(out, e.Address.String())
			}
		}
		return out
	}
	waitFor(t, "initial changes", func() bool { return w.Pending() == 2 })
	w.TakeChanges()
	if got := endpoints(web); !reflect.DeepEqual(got, []string{"10.244.1.5"}) {
		t.Fatalf("web: %v", got)
	}
	slices := client.DiscoveryV1().EndpointSlices("default")
	if _, err := slices.Update(ctx, testSlice("api", "web-1", "", "10.244.1.5"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the moved slice", func() bool { return w.Pending() == 2 })
	if c := w.TakeChanges(); !reflect.DeepEqual(c.Services, []types.NamespacedName{api, web}) {
		t.Errorf("a slice moved from web to api changed %v", c.Services)
	}
	if got, got2 := endpoints(web), endpoints(api); got != nil || !reflect.DeepEqual(got2, []string{"10.244.1.5"}) {
		t.Fatalf("after the move: web %v, api %v", got, got2)
	}
	if _, err := slices.Create(ctx, testSlice("api", "api-2", "", "10.244.2.6"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a second slice", func() bool { return len(endpoints(api)) == 2 })
	if err := slices.Delete(ctx, "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deletion", func() bool { return reflect.DeepEqual(endpoints(api), []string{"10.244.2.6"}) })
	if err := slices.Delete(ctx, "api-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the last deletion", func() bool { return endpoints(api) == nil })
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.bySvc) != 0 {
		t.Errorf("index after every slice was deleted: %v", w.bySvc)
	}
}
