package docscheck

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"sigs.k8s.io/yaml"
)

// The Grafana dashboard and the alerts of deploy/components/monitoring
// name only series the proxy exports. The real Prometheus evaluates them
// in `make test-prometheus` (test/e2e/prometheus); this is its cheap half.

const monitoringDir = "../../deploy/components/monitoring"

// promMetric matches the series names a query of the dashboard or the
// alerts may use: the proxy's, kube-proxy's, client-go's, the Go and
// process collectors', and Prometheus' own up.
var promMetric = regexp.MustCompile(`\b(?:ipvs_proxy|kubeproxy|rest_client|process|go)_[a-z0-9_]*[a-z0-9]\b|\bup\b`)

// clientGoSeries are client-go's series, registered by component-base's
// adapters (internal/metrics/restclient.go), not on the proxy's registry.
var clientGoSeries = map[string]bool{
	"rest_client_requests_total":                  true,
	"rest_client_request_duration_seconds_bucket": true,
}

// dashboardExprs are the PromQL expressions of every panel's targets,
// rows' panels included, by panel title.
func dashboardExprs(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string
		Targets []struct{ Expr string }
		Panels  json.RawMessage
	}
	var d struct{ Panels []panel }
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := map[string][]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out[p.Title] = append(out[p.Title], tg.Expr)
			}
			var nested []panel
			if len(p.Panels) > 0 && json.Unmarshal(p.Panels, &nested) == nil {
				walk(nested)
			}
		}
	}
	walk(d.Panels)
	return out
}

// TestDashboardAndAlertsNameExportedSeries extracts every expression of
// the dashboard and the PrometheusRule and requires each series it names
// to be one the proxy exports.
func TestDashboardAndAlertsNameExportedSeries(t *testing.T) {
	exported := exportedMetrics(t)
	exprs := dashboardExprs(t, filepath.Join(monitoringDir, "dashboard.json"))
	if len(exprs) < 10 {
		t.Fatalf("dashboard.json: %d panels with queries", len(exprs))
	}
	b, err := os.ReadFile(filepath.Join(monitoringDir, "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rule struct {
		Spec struct {
			Groups []struct {
				Rules []struct{ Alert, Expr string }
			}
		}
	}
	if err := yaml.Unmarshal(b, &rule); err != nil {
		t.Fatal(err)
	}
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			exprs["alert "+r.Alert] = append(exprs["alert "+r.Alert], r.Expr)
		}
	}
	for where, es := range exprs {
		for _, e := range es {
			names := promMetric.FindAllString(e, -1)
			if len(names) == 0 {
				t.Errorf("%s: %s names no series", where, e)
			}
			for _, n := range names {
				if n != "up" && !exported[n] && !clientGoSeries[n] {
					t.Errorf("%s: %s names %s, which the proxy does not export (internal/metrics)", where, e, n)
				}
			}
		}
	}
}
