package informers

import (
	"context"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

// TestClusterDNS: the Services in kube-system labelled k8s-app=kube-dns are
// the cluster DNS; the label elsewhere, or another value, is not (and the
// lean copies keep the label in kube-system alone).
func TestClusterDNS(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dns := testService("kube-dns")
	dns.Namespace, dns.Labels = ClusterDNSNamespace, map[string]string{LabelClusterDNS: ClusterDNSValue}
	other := testService("metrics")
	other.Namespace, other.Labels = ClusterDNSNamespace, map[string]string{LabelClusterDNS: "metrics-server"}
	elsewhere := testService("my-dns")
	elsewhere.Labels = map[string]string{LabelClusterDNS: ClusterDNSValue}
	w, err := NewWatcher(fake.NewClientset(dns, other, elsewhere, testNode("a", "192.168.0.1")), "a", nil, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Start(ctx)
	if !w.WaitForCacheSync(ctx) {
		t.Fatal("caches did not sync")
	}
	want := []types.NamespacedName{{Namespace: ClusterDNSNamespace, Name: "kube-dns"}}
	if got := w.ClusterDNS(); !slices.Equal(got, want) {
		t.Errorf("ClusterDNS() = %v, want %v", got, want)
	}
	if l := w.ServiceObject("default", "my-dns").Labels; l[LabelClusterDNS] != "" {
		t.Errorf("a Service outside kube-system keeps %s in the cache: %v", LabelClusterDNS, l)
	}
}
