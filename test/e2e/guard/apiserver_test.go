package guard_test

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/ipvs-proxy/ipvs-proxy/informers"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/guard"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/drive/applier"
	"github.com/ipvs-proxy/ipvs-proxy/internal/drive/daemon"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
)

// recorder is the kernel: it keeps the last state of a full sync.
type recorder struct {
	mu sync.Mutex
	st *planner.State
}

func (r *recorder) Full(st *planner.State, _ []netip.Addr) (*applier.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := *st
	r.st = &c
	return &applier.Result{}, nil
}

func (r *recorder) Partial(*planner.State, applier.Index, ...types.NamespacedName) (*applier.Result, error) {
	return &applier.Result{}, nil
}

func (r *recorder) last() *planner.State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st
}

// TestInClusterAPIServer: deploy/base's configuration against the real
// API server. The proxy in a pod dials KUBERNETES_SERVICE_HOST, which the
// kubelet sets to the ClusterIP the API server gave the kubernetes Service.
// That address must be bound on kube-ipvs0 like any ClusterIP, and the API
// server's own endpoint (the default/kubernetes EndpointSlice, as the API
// server's endpoint reconciler writes it; this test server runs with
// --endpoint-reconciler-type=none, so the test writes it in the same
// shape) must be protected from a tenant's externalIP.
func TestInClusterAPIServer(t *testing.T) {
	srv := apiserver.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := kubernetes.NewForConfigOrDie(srv.Config())

	var k8s *corev1.Service
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		s, err := client.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
		k8s = s
		return err == nil, nil
	}); err != nil {
		t.Fatalf("the API server did not create default/kubernetes: %v", err)
	}
	clusterIP := k8s.Spec.ClusterIP
	endpoint := apiserver.GuestHostIP // the address the API server advertises, as the VM reaches it
	if _, err := client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "kubernetes", Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{endpoint}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(srv.Port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "capture"},
		Spec: corev1.ServiceSpec{ExternalIPs: []string{endpoint},
			Ports: []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// What rest.InClusterConfig builds from KUBERNETES_SERVICE_HOST and
	// _PORT (its token file does not exist here; the watch itself uses
	// the admin's configuration).
	inCluster := &rest.Config{Host: "https://" + net.JoinHostPort(clusterIP, strconv.Itoa(int(k8s.Spec.Ports[0].Port)))}
	w, err := informers.NewWatcher(client, "n1", nil, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	loop := &daemon.Loop{
		Source: w, Applier: rec, SyncPeriod: time.Hour,
		Options:   planner.Options{NodeName: "n1", LocalAddrs: []netip.Addr{netip.MustParseAddr("192.168.0.1")}, Scheduler: "rr"},
		APIServer: guard.APIServer{Dialed: daemon.APIServerAddrs(ctx, inCluster), InCluster: true},
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	w.Start(runCtx)
	done := make(chan error, 1)
	go func() { done <- loop.Run(runCtx) }()

	vip := netip.PrefixFrom(netip.MustParseAddr(clusterIP), 32)
	var st *planner.State
	if err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		st = rec.last()
		return st != nil && slices.ContainsFunc(st.Refusals, func(r model.Refusal) bool { return r.Address == endpoint }), nil
	}); err != nil {
		t.Fatalf("no full sync with the tenant's Service: %v (last state %+v)", err, st)
	}
	stop()
	<-done
	if !slices.Contains(st.Addresses, vip) {
		t.Errorf("the kubernetes Service's ClusterIP %s is not bound: kube-ipvs0 = %v", vip, st.Addresses)
	}
	for _, r := range st.Refusals {
		switch r.Address {
		case clusterIP:
			t.Errorf("the kubernetes Service's ClusterIP refused: %v", r)
		case endpoint:
			if r.Reason != model.ReasonAPIServer {
				t.Errorf("the API server's endpoint refused as %s, want %s: %v", r.Reason, model.ReasonAPIServer, r)
			}
		}
	}
	if slices.Contains(st.Addresses, netip.PrefixFrom(netip.MustParseAddr(endpoint), 32)) {
		t.Errorf("the API server's endpoint %s is bound: kube-ipvs0 = %v", endpoint, st.Addresses)
	}
}
