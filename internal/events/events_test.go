package events

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ipvs-proxy/ipvs-proxy/internal/decide/model"
)

type sent struct {
	ref          *corev1.ObjectReference
	reason, note string
}

func collect() (*[]sent, func(*corev1.ObjectReference, string, string)) {
	var out []sent
	return &out, func(ref *corev1.ObjectReference, reason, note string) {
		out = append(out, sent{ref, reason, note})
	}
}

var nodeIP = model.Refusal{Subject: model.ServiceSubject(types.NamespacedName{Namespace: "default", Name: "nginx"}), Field: "spec.externalIPs", Address: "10.0.0.211",
	Reason: model.ReasonNodeIP, Message: "address of node b; not bound on kube-ipvs0, served at L4 only on node b"}

func TestDedup(t *testing.T) {
	got, sink := collect()
	e := New(sink, func(kind, ns, name string) string { return "uid-" + kind + "-" + name }, DefaultOptions)
	loop := model.Refusal{Subject: model.ServiceSubject(types.NamespacedName{Namespace: "default", Name: "nginx"}), Field: "spec.externalIPs", Address: "127.0.0.1", Reason: model.ReasonLoopback, Message: "never a VIP; skipped"}
	node := model.Refusal{Subject: model.NodeSubject("b"), Field: "status.addresses[0]", Address: "x", Reason: model.ReasonInvalidAddress, Message: "not an IP"}

	if n, _ := e.Report([]model.Refusal{nodeIP, loop, node}); n != 3 {
		t.Fatalf("first report emitted %d, want 3", n)
	}
	if n, _ := e.Report([]model.Refusal{nodeIP, loop, node}); n != 0 {
		t.Errorf("same refusals again emitted %d, want 0", n)
	}
	if n, _ := e.Report([]model.Refusal{nodeIP}); n != 0 {
		t.Errorf("a subset emitted %d, want 0", n)
	}
	// loop went away and comes back: reported again.
	if n, _ := e.Report([]model.Refusal{nodeIP, loop}); n != 1 {
		t.Errorf("a returning refusal emitted %d, want 1", n)
	}
	changed := nodeIP
	changed.Message = "something else"
	if n, _ := e.Report([]model.Refusal{changed, loop}); n != 1 {
		t.Errorf("a changed refusal emitted %d, want 1", n)
	}
	if len(*got) != 5 {
		t.Fatalf("sent %d events", len(*got))
	}
	first := (*got)[0]
	for _, s := range *got {
		if s.reason == "NodeIP" {
			first = s
			break
		}
	}
	if first.ref.Kind != "Service" || first.ref.Namespace != "default" || first.ref.Name != "nginx" || first.ref.UID != "uid-Service-nginx" ||
		!strings.Contains(first.note, "spec.externalIPs 10.0.0.211") || !strings.Contains(first.note, "served at L4") {
		t.Errorf("event %+v %q", first.ref, first.note)
	}
	var sawNode bool
	for _, s := range *got {
		if s.ref.Kind == "Node" && s.ref.Name == "b" && s.ref.Namespace == "" {
			sawNode = true
		}
	}
	if !sawNode {
		t.Error("a Node refusal was not reported on the Node")
	}
}

func TestRateLimit(t *testing.T) {
	got, sink := collect()
	e := New(sink, nil, Options{QPS: 0.001, Burst: 3})
	var rs []model.Refusal
	for i := range 10 {
		r := nodeIP
		r.Address = "10.0.0." + string(rune('0'+i))
		rs = append(rs, r)
	}
	n, limited := e.Report(rs)
	if n != 3 || limited != 7 || len(*got) != 3 {
		t.Errorf("emitted %d limited %d sent %d, want 3 7 3", n, limited, len(*got))
	}
}

// TestBroadcaster writes through the real EventBroadcaster to a fake
// clientset and checks the stored Event.
func TestBroadcaster(t *testing.T) {
	client := fake.NewClientset(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "nginx", UID: "u1"}})
	sink, stop := NewBroadcaster(client, "node-a")
	defer stop()
	e := New(sink, func(string, string, string) string { return "u1" }, DefaultOptions)
	e.Report([]model.Refusal{nodeIP})
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		evs, err := client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs.Items) > 0 {
			ev := evs.Items[0]
			if ev.Type != corev1.EventTypeWarning || ev.Reason != "NodeIP" || ev.Source.Component != Component ||
				ev.Source.Host != "node-a" || ev.InvolvedObject.Name != "nginx" || ev.InvolvedObject.UID != "u1" {
				t.Errorf("event %+v", ev)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no Event written")
}

// TestScopes: an elected reporter reports its node-scoped refusals always
// and the cluster-scoped ones only while leading; starting to lead reports
// the last ones at once, and leading again after a pause reports them
// again.
func TestScopes(t *testing.T) {
	got, sink := collect()
	e := New(sink, nil, Options{QPS: 100, Burst: 100, Elected: true})
	local := model.Refusal{Subject: model.ServiceSubject(types.NamespacedName{Namespace: "default", Name: "web"}), Field: "spec.externalIPs", Address: "192.0.2.1", Reason: model.ReasonLocalAddress, Message: "an address of this node"}
	junk := model.Refusal{Subject: model.ServiceSubject(types.NamespacedName{Namespace: "default", Name: "web"}), Field: "spec.ports[0].port", Address: "0", Reason: model.ReasonInvalidPort, Message: "must be 1-65535"}
	if model.ReasonLocalAddress.Scope() != model.ScopeNode || model.ReasonInvalidPort.Scope() != model.ScopeCluster {
		t.Fatal("scopes of the test's reasons")
	}
	if n, _ := e.Report([]model.Refusal{local, junk}); n != 1 || (*got)[0].reason != "LocalAddress" || e.Leading() {
		t.Fatalf("not leading: emitted %d %+v, want the node-scoped one only", n, *got)
	}
	e.SetLeading(true)
	if len(*got) != 2 || (*got)[1].reason != "InvalidPort" {
		t.Fatalf("starting to lead did not report the cluster-scoped refusal: %+v", *got)
	}
	if n, _ := e.Report([]model.Refusal{local, junk}); n != 0 {
		t.Errorf("leading, the same refusals again emitted %d", n)
	}
	e.SetLeading(false)
	if n, _ := e.Report([]model.Refusal{local, junk}); n != 0 {
		t.Errorf("no longer leading emitted %d", n)
	}
	e.SetLeading(true)
	if len(*got) != 3 || (*got)[2].reason != "InvalidPort" {
		t.Errorf("leading again: %+v", *got)
	}

	// Not elected: everything, as a proxy alone.
	_, sink2 := collect()
	alone := New(sink2, nil, DefaultOptions)
	if n, _ := alone.Report([]model.Refusal{local, junk}); n != 2 || !alone.Leading() {
		t.Errorf("not elected: emitted %d, leading %v", n, alone.Leading())
	}
}

// TestElectFailover: two candidates over a fake clientset; one leads, and
// when it stops (releasing the Lease) the other takes over.
func TestElectFailover(t *testing.T) {
	client := fake.NewClientset()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var rs [2]*Refusals
	var stops [2]context.CancelFunc
	for i := range rs {
		_, sink := collect()
		rs[i] = New(sink, nil, Options{QPS: 100, Burst: 100, Elected: true})
		cctx, stop := context.WithCancel(ctx)
		stops[i] = stop
		go func() {
			_ = rs[i].Elect(cctx, Election{Client: client, Namespace: "ipvs-proxy", Identity: []string{"a", "b"}[i],
				LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 200 * time.Millisecond}, zap.NewNop())
		}()
	}
	leader := waitLeader(t, rs[:], -1)
	stops[leader]()
	next := waitLeader(t, rs[:], leader)
	lease, err := client.CoordinationV1().Leases("ipvs-proxy").Get(ctx, LeaseName, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != []string{"a", "b"}[next] {
		t.Fatalf("Lease %+v (%v), want held by the new leader", lease, err)
	}
}

// waitLeader waits until exactly one of rs other than not leads.
func waitLeader(t *testing.T, rs []*Refusals, not int) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		leader, n := -1, 0
		for i, r := range rs {
			if r.Leading() {
				leader, n = i, n+1
			}
		}
		if n == 1 && leader != not {
			return leader
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("no single leader in 20 s")
	return -1
}
