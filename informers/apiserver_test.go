package informers

import (
	"context"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/convert"
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestAPIServerEndpoints(t *testing.T) {
	api := testSlice("kubernetes", "kubernetes", "", "10.0.2.100", "::ffff:10.0.2.101", "bad")
	api.Endpoints[0].Addresses = append(api.Endpoints[0].Addresses, "10.0.2.102")
	other := testSlice("web", "web-1", "", "10.244.1.5")
	otherNS := testSlice("kubernetes", "kubernetes", "", "10.244.1.6")
	otherNS.Namespace = "tenant"
	got := convert.APIServerEndpoints([]*discoveryv1.EndpointSlice{other, api, otherNS, nil})
	if want := addrs("10.0.2.100", "10.0.2.101", "10.0.2.102"); !slices.Equal(got, want) {
		t.Errorf("APIServerEndpoints = %v, want %v", got, want)
	}
	svc := testService("web")
	svc.Spec.ClusterIPs = []string{"10.96.0.10", "fd00:96::10"}
	legacy := testService("old")
	legacy.Spec.ClusterIPs = nil
	legacy.Spec.ClusterIP = "10.96.0.11"
	if got, want := convert.ServiceIPs([]*corev1.Service{svc, legacy, nil}), addrs("10.96.0.10", "10.96.0.11", "fd00:96::10"); !slices.Equal(got, want) {
		t.Errorf("ServiceIPs = %v, want %v", got, want)
	}
}

// TestWatcherAPIServer: the Watcher knows the default/kubernetes endpoints
// and the Services' ClusterIPs, and a change of the endpoints is a change
// of the guard (Changes.Nodes: a full sync).
func TestWatcherAPIServer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k := testService("kubernetes")
	k.Spec.ClusterIP, k.Spec.ClusterIPs = "10.96.0.1", []string{"10.96.0.1"}
	client := fake.NewClientset(k, testService("web"), testSlice("kubernetes", "kubernetes", "", "10.0.2.100"))
	w, err := NewWatcher(client, "a", nil, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Start(ctx)
	if !w.WaitForCacheSync(ctx) {
		t.Fatal("no cache sync")
	}
	waitFor(t, "the API server endpoints", func() bool { return len(w.APIServerEndpoints()) == 1 })
	if got := w.APIServerEndpoints(); !slices.Equal(got, addrs("10.0.2.100")) {
		t.Errorf("APIServerEndpoints = %v", got)
	}
	for a, want := range map[string]bool{"10.96.0.1": true, "10.96.0.10": true, "::ffff:10.96.0.1": true, "10.0.2.100": false} {
		if got := w.IsServiceIP(netip.MustParseAddr(a)); got != want {
			t.Errorf("IsServiceIP(%s) = %v, want %v", a, got, want)
		}
	}
	// The ClusterIPs gathered by the questions above are forgotten when a
	// Service comes or goes.
	db := testService("db")
	db.Spec.ClusterIP, db.Spec.ClusterIPs = "10.96.0.50", []string{"10.96.0.50"}
	if _, err := client.CoreV1().Services("default").Create(ctx, db, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new Service's ClusterIP", func() bool { return w.IsServiceIP(netip.MustParseAddr("10.96.0.50")) })
	if err := client.CoreV1().Services("default").Delete(ctx, "db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deleted Service's ClusterIP gone", func() bool { return !w.IsServiceIP(netip.MustParseAddr("10.96.0.50")) })
	w.TakeChanges()
	if _, err := client.DiscoveryV1().EndpointSlices("default").Update(ctx, testSlice("kubernetes", "kubernetes", "", "10.0.2.100", "10.0.2.101"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new endpoint", func() bool { return len(w.APIServerEndpoints()) == 2 })
	if c := w.TakeChanges(); !c.Nodes {
		t.Errorf("API server endpoints changed and Changes.Nodes is false: %+v", c)
	}
	// Another Service's slice is no guard change.
	if _, err := client.DiscoveryV1().EndpointSlices("default").Create(ctx, testSlice("web", "web-1", "", "10.244.1.5"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the web slice", func() bool { return w.Pending() > 0 })
	if c := w.TakeChanges(); c.Nodes {
		t.Errorf("a web slice made Changes.Nodes true: %+v", c)
	}
}

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}
