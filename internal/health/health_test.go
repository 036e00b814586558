package health

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
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

// decode reads a /healthz or /livez body as kube-proxy 1.34 writes it.
func decode(t *testing.T, raw string) body {
	t.Helper()
	var b body
	if err := json.Unmarshal([]byte(raw), &b); err != nil {
		t.Fatalf("body %s: %v", raw, err)
	}
	return b
}

func TestProxyHealth(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	p := NewProxy(60*time.Second, c.now)
	p.Families = []string{"IPv4", "IPv6"}
	answers := map[string]int{}
	p.OnAnswer = func(path string, code int) { answers[fmt.Sprintf("%s %d", path, code)]++ }
	h := p.Handler()
	// Starting up: alive, but not ready before the first full sync, and
	// not eligible before this node's Node is seen (as kube-proxy).
	if code, _ := get(t, h, "/livez"); code != 200 {
		t.Fatalf("/livez starting up: %d, want 200", code)
	}
	code, raw := get(t, h, "/healthz")
	if b := decode(t, raw); code != 503 || b.NodeEligible == nil || *b.NodeEligible || !b.Healthy {
		t.Fatalf("/healthz starting up: %d %s, want 503, nodeEligible false", code, raw)
	}
	p.SyncNode(&corev1.Node{})
	if code, _ := get(t, h, "/healthz"); code != 503 {
		t.Fatalf("/healthz before the first sync: %d, want 503", code)
	}
	if p.ServiceProxyHealthy() {
		t.Error("serviceProxyHealthy before the first sync")
	}
	p.Updated()
	if code, _ := get(t, h, "/healthz"); code != 200 || !p.ServiceProxyHealthy() {
		t.Fatalf("/healthz after the first sync: %d", code)
	}
	p.QueuedUpdate()
	c.add(59 * time.Second)
	p.QueuedUpdate() // a later change does not reset the oldest one
	if code, _ := get(t, h, "/livez"); code != 200 {
		t.Fatalf("queued 59s ago: %d, want 200", code)
	}
	c.add(2 * time.Second)
	for _, path := range []string{"/healthz", "/livez"} {
		code, raw := get(t, h, path)
		b := decode(t, raw)
		if code != 503 || b.Healthy || b.Status["IPv6"].Healthy || !b.Status["IPv4"].LastUpdated.Equal(time.Unix(1000, 0)) {
			t.Errorf("%s with a change queued 61s ago: %d %s, want 503, unhealthy, lastUpdated the sync's", path, code, raw)
		}
	}
	if p.ServiceProxyHealthy() {
		t.Error("serviceProxyHealthy while unhealthy")
	}
	p.Updated()
	code, raw = get(t, h, "/healthz")
	if b := decode(t, raw); code != 200 || b.NodeEligible == nil || !*b.NodeEligible || !b.Healthy || len(b.Status) != 2 || !b.LastUpdated.Equal(c.now()) {
		t.Errorf("after a sync: %d %s", code, raw)
	}
	if _, raw := get(t, h, "/livez"); strings.Contains(raw, "nodeEligible") {
		t.Errorf("/livez reports nodeEligible: %s", raw)
	}
	// A node being deleted fails /healthz only.
	now := metav1.NewTime(c.now())
	p.SyncNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", DeletionTimestamp: &now}})
	if code, raw := get(t, h, "/healthz"); code != 503 || !strings.Contains(raw, `"nodeEligible":false`) {
		t.Errorf("deleted node /healthz: %d %s", code, raw)
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
	if answers["/healthz 200"] != 3 || answers["/healthz 503"] != 5 || answers["/livez 503"] != 1 {
		t.Errorf("answers counted: %v", answers)
	}
}

func TestProxyMode(t *testing.T) {
	h := WithProxyMode(http.NotFoundHandler())
	if code, raw := get(t, h, "/proxyMode"); code != 200 || raw != "ipvs" {
		t.Errorf("/proxyMode: %d %q", code, raw)
	}
	if code, _ := get(t, h, "/metrics"); code != 404 {
		t.Errorf("/metrics not passed on: %d", code)
	}
}

func TestServices(t *testing.T) {
	s := NewServices(nil)
	var proxyHealthy atomic.Bool
	proxyHealthy.Store(true)
	s.ProxyHealthy = proxyHealthy.Load
	addrs := map[uint16]string{}
	s.listen = func(_ netip.Addr, port uint16) (net.Listener, error) {
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
	var checkProxy func(port uint16, code int, name string, n int, healthy bool)
	check := func(port uint16, code int, name string, n int) {
		t.Helper()
		checkProxy(port, code, name, n, true)
	}
	checkProxy = func(port uint16, code int, name string, n int, healthy bool) {
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
		if resp.StatusCode != code || body.Service.Name != name || body.Service.Namespace != "ns" || body.LocalEndpoints != n ||
			body.ServiceProxyHealthy != healthy || resp.Header.Get("X-Load-Balancing-Endpoint-Weight") != fmt.Sprint(n) {
			t.Errorf("port %d: %d %s, want %d %s %d serviceProxyHealthy %v", port, resp.StatusCode, b, code, name, n, healthy)
		}
	}
	check(30001, 200, "a", 2)
	check(30002, 503, "b", 0)
	// An unhealthy proxy fails every answer, as kube-proxy's.
	proxyHealthy.Store(false)
	checkProxy(30001, 503, "a", 2, false)
	proxyHealthy.Store(true)
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

// TestServicesRestricted: restricted to --nodeport-addresses' node
// addresses, a healthCheckNodePort server answers on them and nowhere else
// (kubernetes#82163); unrestricted again, it answers on every address.
// 127.0.0.1 plays the node address NodePorts are left on, 127.0.0.2 another
// of the node's addresses.
func TestServicesRestricted(t *testing.T) {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	s := NewServices(nil)
	defer s.Close()
	want := map[uint16]ServiceHealth{port: {Namespace: "ns", Name: "a", LocalEndpoints: 1}}
	answers := func(a string) bool {
		c := http.Client{Timeout: 2 * time.Second}
		resp, err := c.Get("http://" + net.JoinHostPort(a, fmt.Sprint(port)) + "/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	s.Restrict([]netip.Addr{netip.MustParseAddr("127.0.0.1")}, true)
	if errs := s.Sync(want); len(errs) > 0 {
		t.Fatal(errs)
	}
	if !answers("127.0.0.1") {
		t.Error("restricted: no answer on the node port address 127.0.0.1")
	}
	if answers("127.0.0.2") {
		t.Error("restricted to 127.0.0.1: answered on 127.0.0.2, an address --nodeport-addresses leaves out")
	}
	s.Restrict([]netip.Addr{netip.MustParseAddr("127.0.0.1")}, false)
	if errs := s.Sync(want); len(errs) > 0 {
		t.Fatal(errs)
	}
	for _, a := range []string{"127.0.0.1", "127.0.0.2"} {
		if !answers(a) {
			t.Errorf("unrestricted: no answer on %s", a)
		}
	}
	s.Restrict(nil, true)
	if errs := s.Sync(want); len(errs) > 0 || answers("127.0.0.1") {
		t.Errorf("restricted to no address: %v, or still answering", errs)
	}
}
