package informers

import (
	"context"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ipvs-proxy/ipvs-proxy/internal/model"
)

// TestVIPChangeMarksNamers: a LoadBalancer IP written on one Service marks
// changed the Services naming that address, as an externalIP or as an
// endpoint, so their conversions refuse it now, not at their next change.
func TestVIPChangeMarksNamers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ext := testService("ext")
	ext.Spec.ClusterIP, ext.Spec.ClusterIPs = "10.96.0.11", []string{"10.96.0.11"}
	ext.Spec.ExternalIPs = []string{"192.0.2.53"}
	lb := testService("lb")
	lb.Spec.Type = corev1.ServiceTypeLoadBalancer
	client := fake.NewClientset(testService("web"), testSlice("web", "web-1", "", "10.244.1.5", "192.0.2.53"), ext, lb, testNode("a", "192.168.0.1"))
	w, err := NewWatcher(client, "a", nil, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Start(ctx)
	if !w.WaitForCacheSync(ctx) {
		t.Fatal("caches did not sync")
	}
	waitFor(t, "initial changes", func() bool { return w.Pending() == 3 })
	w.TakeChanges()
	name := func(n string) types.NamespacedName { return types.NamespacedName{Namespace: "default", Name: n} }
	if ports, _, refusals := w.Service(name("ext")); len(ports) != 1 || len(ports[0].ExternalIPs) != 1 || len(refusals) != 0 {
		t.Fatalf("before the LoadBalancer IP: ext %v, refused %v", ports, refusals)
	}

	lb.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.53"}}
	if _, err := client.CoreV1().Services("default").UpdateStatus(ctx, lb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the status change", func() bool { return w.Pending() == 1 })
	c := w.TakeChanges()
	if want := []types.NamespacedName{name("ext"), name("lb"), name("web")}; !reflect.DeepEqual(c.Services, want) {
		t.Errorf("changed %v, want %v", c.Services, want)
	}
	ports, _, refusals := w.Service(name("ext"))
	if len(ports) != 1 || len(ports[0].ExternalIPs) != 0 || len(refusals) != 1 || refusals[0].Reason != model.ReasonAddressConflict {
		t.Errorf("after: ext %v, refused %v", ports, refusals)
	}
	_, eps, _ := w.Service(name("web"))
	for _, es := range eps {
		for _, e := range es {
			if e.VIP != (e.Address.String() == "192.0.2.53") {
				t.Errorf("endpoint %s marked VIP %v", e.Address, e.VIP)
			}
		}
	}
}
