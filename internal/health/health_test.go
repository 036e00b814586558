package health

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec.Code, rec.Body.String()
}

func TestProxyHealth(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	p := NewProxy(60*time.Second, c.now)
	h := p.Handler()
	if code, _ := get(t, h, "/healthz"); code != 200 {
		t.Fatalf("starting up: %d, want 200", code)
	}
	p.QueuedUpdate()
	c.add(59 * time.Second)
	p.QueuedUpdate() // a later change does not reset the oldest one
	if code, _ := get(t, h, "/livez"); code != 200 {
		t.Fatalf("queued 59s ago: %d, want 200", code)
	}
	c.add(2 * time.Second)
	for _, path := range []string{"/healthz", "/livez"} {
		if code, _ := get(t, h, path); code != 503 {
			t.Errorf("%s with a change queued 61s ago: %d, want 503", path, code)
		}
	}
	p.Updated()
	code, body := get(t, h, "/healthz")
	if code != 200 || !strings.Contains(body, `"nodeEligible": true`) {
		t.Errorf("after a sync: %d %s", code, body)
	}
	// A node being deleted fails /healthz only.
	now := metav1.NewTime(c.now())
	p.SyncNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", DeletionTimestamp: &now}})
	if code, body := get(t, h, "/healthz"); code != 503 || !strings.Contains(body, `"nodeEligible": false`) {
		t.Errorf("deleted node /healthz: %d %s", code, body)
	}
	if code, _ := get(t, h, "/livez"); code != 200 {
		t.Errorf("deleted node /livez: %d, want 200", code)
	}
	p.SyncNode(&corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: ToBeDeletedTaint}}}})
	if code, _ := get(t, h, "/healthz"); code != 503 {
		t.Errorf("tainted node /healthz: %d, want 503", code)
	}
	p.SyncNode(&corev1.Node{})
	if code, _ := get(t, h, "/healthz"); code != 200 {
		t.Errorf("eligible again: %d", code)
	}
}

func TestServices(t *testing.T) {
	s := NewServices(nil)
	addrs := map[uint16]string{}
	s.listen = func(port uint16) (net.Listener, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err == nil {
			addrs[port] = ln.Addr().String()
		}
		return ln, err
	}
	defer s.Close()
	if errs := s.Sync(map[uint16]ServiceHealth{
		30001: {Namespace: "ns", Name: "a", LocalEndpoints: 2},
		30002: {Namespace: "ns", Name: "b"},
	}); len(errs) > 0 {
		t.Fatal(errs)
	}
	check := func(port uint16, code int, name string, n int) {
		t.Helper()
		resp, err := http.Get("http://" + addrs[port] + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var body svcBody
		if err := json.Unmarshal(b, &body); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if resp.StatusCode != code || body.Service.Name != name || body.Service.Namespace != "ns" || body.LocalEndpoints != n {
			t.Errorf("port %d: %d %s, want %d %s %d", port, resp.StatusCode, b, code, name, n)
		}
	}
	check(30001, 200, "a", 2)
	check(30002, 503, "b", 0)
	old := addrs[30001]
	s.Sync(map[uint16]ServiceHealth{30001: {Namespace: "ns", Name: "a", LocalEndpoints: 0}})
	if addrs[30001] != old {
		t.Error("an updated port's server was restarted")
	}
	check(30001, 503, "a", 0)
	deadline := time.Now().Add(2 * time.Second)
	for {
		resp, err := http.Get("http://" + addrs[30002] + "/")
		if err != nil {
			break
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatal("server of a removed port still answers")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
