package events

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ipvs-proxy/ipvs-proxy/internal/model"
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

var nodeIP = model.Refusal{Service: "default/nginx", Field: "spec.externalIPs", Address: "10.0.0.211",
	Reason: model.ReasonNodeIP, Message: "address of node b; not bound on kube-ipvs0, served at L4 only on node b"}

func TestDedup(t *testing.T) {
	got, sink := collect()
	e := New(sink, func(kind, ns, name string) string { return "uid-" + kind + "-" + name }, DefaultOptions)
	loop := model.Refusal{Service: "default/nginx", Field: "spec.externalIPs", Address: "127.0.0.1", Reason: model.ReasonLoopback, Message: "never a VIP; skipped"}
	node := model.Refusal{Service: "Node/b", Field: "status.addresses[0]", Address: "x", Reason: model.ReasonInvalidAddress, Message: "not an IP"}

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
