package metrics

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
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
