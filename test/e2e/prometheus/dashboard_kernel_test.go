//go:build kernel

package prometheus_test

import (
	"math"
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// emptyOnAHealthyProxy are the dashboard's queries that may be empty: the
// API server's 3xx and 5xx answers, none on a healthy proxy (kube-proxy's
// panel is empty too).
var emptyOnAHealthyProxy = []string{`code=~"3.."`, `code=~"5.."`}

// checkGrafanaDashboard evaluates every query of the component's Grafana
// dashboard through Prometheus: each must return samples (histogram
// quantiles finite ones, but the GET latency's: see
// testdata/kube-proxy-dashboard.yaml), and each series it names must be
// one Prometheus scraped from the proxy; so must every series the rule
// files' expressions name.
func checkGrafanaDashboard(t *testing.T, p *promAPI, ruleFiles []string) {
	t.Helper()
	named := map[string]string{}
	for _, q := range dashboardQueries(t) {
		for _, n := range seriesName.FindAllString(q.Expr, -1) {
			named[n] = "panel " + q.Panel
		}
		res, err := p.reported(t, "dashboard ", q.Panel, q.Expr)
		if err != nil {
			t.Error(err)
			continue
		}
		mayBeEmpty := false
		for _, e := range emptyOnAHealthyProxy {
			mayBeEmpty = mayBeEmpty || strings.Contains(q.Expr, e)
		}
		if len(res) == 0 && !mayBeEmpty {
			t.Errorf("dashboard panel %q: %s is empty", q.Panel, q.Expr)
		}
		if strings.HasPrefix(q.Expr, "histogram_quantile") && !strings.Contains(q.Expr, `verb="GET"`) {
			for _, s := range res {
				if f := s.float(); math.IsNaN(f) || math.IsInf(f, 0) {
					t.Errorf("dashboard panel %q: %s = %v for %v: no observation in the window", q.Panel, q.Expr, f, s.Metric)
				}
			}
		}
	}
	for _, f := range ruleFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var rf struct {
			Groups []struct {
				Rules []struct{ Alert, Expr string }
			}
		}
		if err := yaml.Unmarshal(b, &rf); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				for _, n := range seriesName.FindAllString(r.Expr, -1) {
					named[n] = "alert " + r.Alert
				}
			}
		}
	}
	// The control: a misspelt name, which the same check must catch.
	const misspelt = "ipvs_proxy_service_connection_total"
	if scraped(t, p, misspelt) {
		t.Errorf("control: Prometheus has series %s, which the proxy does not export", misspelt)
	}
	for n, where := range named {
		if !scraped(t, p, n) {
			t.Errorf("%s names %s: Prometheus has no such series from the proxy", where, n)
		}
	}
}

// scraped reports whether Prometheus holds series name from the proxy.
func scraped(t *testing.T, p *promAPI, name string) bool {
	t.Helper()
	res, err := p.query(`count({__name__="` + name + `", job="kube-proxy"})`)
	if err != nil {
		t.Error(err)
	}
	return len(res) > 0
}

// checkServiceTraffic: the traffic the test sent through web's ClusterIP
// is in its per-Service series, and no other Service's connections moved.
func checkServiceTraffic(t *testing.T, p *promAPI) {
	t.Helper()
	for expr, want := range map[string]bool{
		`sum(ipvs_proxy_service_connections_total{job="kube-proxy", namespace="` + vmNS + `", service="web", kind="cluster"}) > 0`:      true,
		`sum(rate(ipvs_proxy_service_bytes_total{job="kube-proxy", namespace="` + vmNS + `", service="web", direction="out"}[1m])) > 0`: true,
		`sum(ipvs_proxy_service_connections_total{job="kube-proxy", service!="web"}) > 0`:                                               false,
	} {
		res, err := p.query(expr)
		if err != nil {
			t.Error(err)
			continue
		}
		if got := len(res) > 0; got != want {
			t.Errorf("%s: %v, want a sample: %v", expr, res, want)
		}
	}
}
