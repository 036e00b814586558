package events_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/convert"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/planner"
	"github.com/ipvs-proxy/ipvs-proxy/internal/events"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
)

// claimers is how many proxies report the Node's claim.
const claimers = 10

// TestNodeClaimingAClusterIP: a Node whose status.addresses claims the
// ClusterIP the API server allocated to a Service (issue 37, item 1). Ten
// proxy reporters plan as `run` does (the trust order, then the plan):
// the Service keeps its virtual server on every node, and the Node gets
// one Warning Event, ServiceIP, naming the address: written once for the
// cluster by the holder of the events Lease, not once per node.
func TestNodeClaimingAClusterIP(t *testing.T) {
	srv := apiserver.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := kubernetes.NewForConfigOrDie(srv.Config())
	for _, ns := range []string{"claims", "ipvs-proxy-claims"} {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	svc, err := admin.CoreV1().Services("claims").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "claims", Name: "dns"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "claimer"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A compromised kubelet writes its Node's status.
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.20.9.1"}, {Type: corev1.NodeExternalIP, Address: svc.Spec.ClusterIP}}
	if node, err = admin.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	svcs := []*corev1.Service{svc}
	clusterIP := netip.MustParseAddr(svc.Spec.ClusterIP)
	client := kubernetes.NewForConfigOrDie(srv.Config())
	lookup := func(kind, _, _ string) string {
		if kind == "Node" {
			return string(node.UID)
		}
		return string(svc.UID)
	}
	var wg sync.WaitGroup
	rctx, stop := context.WithCancel(ctx)
	defer func() { stop(); wg.Wait() }()
	for i := range claimers {
		name := fmt.Sprintf("proxy-%02d", i)
		cluster := convert.Convert(svcs, nil, []*corev1.Node{node})
		o := planner.Options{NodeName: name, LocalAddrs: []netip.Addr{netip.AddrFrom4([4]byte{10, 20, 0, byte(i + 1)})}, Scheduler: "rr",
			MasqueradeBit: planner.DefaultMasqueradeBit}
		cluster.Nodes, cluster.Refusals = planner.TrustedNodes(&o, cluster.Nodes, cluster.Refusals, convert.ServiceIPs(svcs))
		st := planner.Plan(cluster, o)
		served := false
		for _, vs := range st.VirtualServers {
			served = served || vs.Address == clusterIP
		}
		if !served {
			t.Fatalf("%s: the Node's claim unprogrammed the ClusterIP %s; refusals %v", name, clusterIP, st.Refusals)
		}
		sink, stopSink := events.NewBroadcaster(client, name)
		r := events.New(sink, lookup, events.Options{QPS: 5, Burst: 100, Elected: true})
		el := election
		el.Client, el.Namespace, el.Identity = client, "ipvs-proxy-claims", name
		wg.Add(2)
		go func() {
			defer wg.Done()
			_ = r.Elect(rctx, el, zap.NewNop())
		}()
		go func() {
			defer wg.Done()
			defer stopSink()
			for {
				r.Report(st.Refusals)
				select {
				case <-rctx.Done():
					return
				case <-time.After(time.Second):
				}
			}
		}()
	}

	evs := settle(ctx, t, admin, metav1.NamespaceAll, node.UID, 1)
	var notes []string
	for _, e := range evs {
		notes = append(notes, e.Source.Host+": "+e.Reason+" "+e.Message)
	}
	t.Logf("Events on Node %s:\n%s", node.Name, strings.Join(notes, "\n"))
	if len(evs) != 1 {
		t.Fatalf("%d Events on the Node from %d proxies, want 1 (once per cluster)", len(evs), claimers)
	}
	e := evs[0]
	if e.Type != corev1.EventTypeWarning || e.Reason != string(model.ReasonServiceIP) || e.InvolvedObject.Kind != "Node" ||
		!strings.Contains(e.Message, svc.Spec.ClusterIP) || !strings.Contains(e.Message, "status.addresses") {
		t.Errorf("the Node's Event is %s %s on %s: %q; want a Warning ServiceIP naming status.addresses %s", e.Type, e.Reason, e.InvolvedObject.Kind, e.Message, svc.Spec.ClusterIP)
	}
}
