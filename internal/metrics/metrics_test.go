package metrics

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func TestMetrics(t *testing.T) {
	m := New()
	m.ObserveSync(ModeFull, 2*time.Second, true)
	m.ObserveSync(ModePartial, 3*time.Millisecond, false)
	m.SetRefusals(map[string]int{"NodeIP": 2})
	m.SetRefusals(map[string]int{"Loopback": 1})
	m.VirtualServers.Set(7)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`ipvs_proxy_sync_duration_seconds_count{mode="full"} 1`,
		`ipvs_proxy_sync_duration_seconds_count{mode="partial"} 1`,
		`ipvs_proxy_apply_errors_total{mode="partial"} 1`,
		`ipvs_proxy_apply_errors_total{mode="full"} 0`,
		`ipvs_proxy_refusals{reason="Loopback"} 1`,
		`ipvs_proxy_virtual_servers 7`,
		`ipvs_proxy_network_programming_duration_seconds_count 0`,
		`go_goroutines`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(body, `reason="NodeIP"`) {
		t.Error("a refusal reason that went away is still exported")
	}
}

func TestWithProfiling(t *testing.T) {
	m := New()
	get := func(h http.Handler, path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec.Code, rec.Body.String()
	}
	h := WithProfiling(m.Handler())
	if code, body := get(h, "/metrics"); code != 200 || !strings.Contains(body, "ipvs_proxy_syncs_total") {
		t.Errorf("/metrics with profiling: %d", code)
	}
	if code, body := get(h, "/debug/pprof/heap?debug=1"); code != 200 || !strings.Contains(body, "heap profile") {
		t.Errorf("/debug/pprof/heap: %d %.80q", code, body)
	}
	if code, body := get(h, "/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Errorf("/debug/pprof/: %d %.80q", code, body)
	}
	// Without it, no profile is served.
	if code, _ := get(m.Handler(), "/debug/pprof/heap"); code != 404 {
		t.Errorf("/debug/pprof/heap without profiling: %d, want 404", code)
	}
}

// TestKubeProxySeries: kube-proxy's kubeproxy_* series (IPVS mode), with
// kube-proxy 1.34's names, labels and buckets, client-go's rest_client_*
// and the build info.
func TestKubeProxySeries(t *testing.T) {
	m := New()
	m.KubeProxy.SetFamilies([]string{"IPv4", "IPv6"})
	m.KubeProxy.Queued(ChangeService, types.NamespacedName{Namespace: "ns", Name: "a"})
	m.KubeProxy.Queued(ChangeEndpoints, types.NamespacedName{Namespace: "ns", Name: "a"})
	m.KubeProxy.Queued(ChangeEndpoints, types.NamespacedName{Namespace: "ns", Name: "b"})
	m.KubeProxy.Queued(ChangeEndpoints, types.NamespacedName{Namespace: "ns", Name: "b"})
	m.KubeProxy.Answered("/healthz", 503)
	m.KubeProxy.Answered("/livez", 200)
	m.KubeProxy.SetNoLocalEndpoints("IPv4", 1, 2)
	m.KubeProxy.SetNoLocalEndpoints("IPv6", 0, 3)
	m.KubeProxy.RestoreFailed("IPv6")
	body := scrape(t, m)
	for _, want := range []string{
		"kubeproxy_sync_proxy_rules_service_changes_total 1",
		"kubeproxy_sync_proxy_rules_service_changes_pending 1",
		"kubeproxy_sync_proxy_rules_endpoint_changes_total 3",
		"kubeproxy_sync_proxy_rules_endpoint_changes_pending 2",
		`kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv6"}`,
		`kubeproxy_proxy_healthz_total{code="503"} 1`,
		`kubeproxy_proxy_livez_total{code="200"} 1`,
		`kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv4",traffic_policy="external"} 2`,
		`kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv4",traffic_policy="internal"} 1`,
		`kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv6",traffic_policy="external"} 3`,
		`kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv6",traffic_policy="internal"} 0`,
		`kubeproxy_sync_proxy_rules_iptables_restore_failures_total{ip_family="IPv4"} 0`,
		`kubeproxy_sync_proxy_rules_iptables_restore_failures_total{ip_family="IPv6"} 1`,
		`ipvs_proxy_build_info{goversion="go`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	m.ObserveSync(ModeFull, 20*time.Millisecond, true)
	m.NetworkProgrammingLatency.Observe(1.5)
	body = scrape(t, m)
	for _, want := range []string{
		"kubeproxy_sync_proxy_rules_service_changes_pending 0",
		"kubeproxy_sync_proxy_rules_endpoint_changes_pending 0",
		// kube-proxy's buckets: 1 ms doubling, 15 of them.
		`kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family="IPv4",le="0.032"} 1`,
		`kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family="IPv6",le="16.384"} 1`,
		`kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"}`,
		// 0.25 s, 0.5 s, then whole seconds to 59 s, ...
		`kubeproxy_network_programming_duration_seconds_bucket{ip_family="IPv4",le="2"} 1`,
		`kubeproxy_network_programming_duration_seconds_bucket{ip_family="IPv4",le="300"} 1`,
		`ipvs_proxy_network_programming_duration_seconds_count 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if n := strings.Count(body, `kubeproxy_network_programming_duration_seconds_bucket{ip_family="IPv4"`); n != 81 {
		t.Errorf("network programming buckets: %d, want kube-proxy's 80 and +Inf", n)
	}
}

// TestRestClientSeries: a request of client-go shows in rest_client_*.
func TestRestClientSeries(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"NodeList","apiVersion":"v1","items":[]}`))
	}))
	defer srv.Close()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	body := scrape(t, New())
	for _, want := range []string{`rest_client_requests_total{code="200",host=`, `rest_client_request_duration_seconds_bucket{host=`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Count(body, "# TYPE go_goroutines ") != 1 {
		t.Error("go_goroutines not exactly once")
	}
}

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("/metrics: %d %s", rec.Code, rec.Body.String())
	}
	return rec.Body.String()
}

// TestConntrackReconcilerSeries: kube-proxy 1.34's conntrack reconciler
// series (pkg/proxy/metrics: ReconcileConntrackFlowsLatency and
// ReconcileConntrackFlowsDeletedEntriesTotal), absent until the first
// round as kube-proxy's, then with its names, ip_family label and buckets
// (1 ms doubling, 15 of them).
func TestConntrackReconcilerSeries(t *testing.T) {
	m := New()
	if body := scrape(t, m); strings.Contains(body, "kubeproxy_conntrack_reconciler_") {
		t.Error("conntrack reconciler series before any round")
	}
	m.KubeProxy.ConntrackReconciled("IPv4", 0.003, 2)
	m.KubeProxy.ConntrackReconciled("IPv4", 0.0005, 0)
	m.KubeProxy.ConntrackReconciled("IPv6", 20, 5)
	body := scrape(t, m)
	for _, want := range []string{
		"# HELP kubeproxy_conntrack_reconciler_sync_duration_seconds ReconcileConntrackFlowsLatency latency in seconds",
		"# TYPE kubeproxy_conntrack_reconciler_sync_duration_seconds histogram",
		`kubeproxy_conntrack_reconciler_sync_duration_seconds_bucket{ip_family="IPv4",le="0.001"} 1`,
		`kubeproxy_conntrack_reconciler_sync_duration_seconds_bucket{ip_family="IPv4",le="0.004"} 2`,
		`kubeproxy_conntrack_reconciler_sync_duration_seconds_bucket{ip_family="IPv6",le="16.384"} 0`,
		`kubeproxy_conntrack_reconciler_sync_duration_seconds_bucket{ip_family="IPv6",le="+Inf"} 1`,
		`kubeproxy_conntrack_reconciler_sync_duration_seconds_count{ip_family="IPv4"} 2`,
		"# HELP kubeproxy_conntrack_reconciler_deleted_entries_total Cumulative conntrack flows deleted by conntrack reconciler",
		"# TYPE kubeproxy_conntrack_reconciler_deleted_entries_total counter",
		`kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family="IPv4"} 2`,
		`kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family="IPv6"} 5`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if n := strings.Count(body, `kubeproxy_conntrack_reconciler_sync_duration_seconds_bucket{ip_family="IPv4"`); n != 16 {
		t.Errorf("conntrack reconciler buckets: %d, want kube-proxy's 15 and +Inf", n)
	}
}

// TestPendingChangesFreed: the maps behind the pending gauges hold no
// memory after the sync that took a first sync's worth of changes (every
// Service and its slices, queued before it).
func TestPendingChangesFreed(t *testing.T) {
	m := New()
	m.KubeProxy.SetFamilies([]string{"IPv4"})
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	for i := range 20_000 {
		k := types.NamespacedName{Namespace: "default", Name: "svc-" + strconv.Itoa(i)}
		m.KubeProxy.Queued(ChangeService, k)
		m.KubeProxy.Queued(ChangeEndpoints, k)
	}
	queued := heap()
	m.ObserveSync(ModeFull, time.Second, true)
	after := heap()
	// The names are the maps' keys: they go with them.
	if grew := int64(queued) - int64(before); grew < 2<<20 {
		t.Fatalf("queuing 20,000 changes of each kind grew the heap by %d B: the test measures nothing", grew)
	}
	if kept := int64(after) - int64(before); kept > 256<<10 {
		t.Errorf("after the sync the pending changes still hold %d B (queued: %d B)", kept, int64(queued)-int64(before))
	}
	if body := scrape(t, m); !strings.Contains(body, "kubeproxy_sync_proxy_rules_service_changes_pending 0") {
		t.Error("pending gauge not 0 after the sync")
	}
}
