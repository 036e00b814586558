package prometheus_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

// dashboardFile is the monitoring component's Grafana dashboard (the
// chart's copy is the same: test/e2e/chart).
const dashboardFile = "../../../deploy/components/monitoring/dashboard.json"

// dashboardQuery is one target of one panel of the dashboard, with
// Grafana's variables resolved (grafanaVars).
type dashboardQuery struct{ Panel, Expr string }

// grafanaVars resolve the dashboard's variables as Grafana does on a
// single-cluster Prometheus, as testdata/kube-proxy-dashboard.yaml says
// for kubernetes-mixin's: $cluster empty, $instance All (.+),
// $__rate_interval 1m.
var grafanaVars = strings.NewReplacer(`"$cluster"`, `""`, `"$instance"`, `".+"`, "$__rate_interval", "1m")

// dashboardQueries are every panel's targets, rows' panels included.
func dashboardQueries(t *testing.T) []dashboardQuery {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string
		Targets []struct{ Expr string }
		Panels  []json.RawMessage
	}
	var d struct{ Panels []json.RawMessage }
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var out []dashboardQuery
	var walk func([]json.RawMessage)
	walk = func(raw []json.RawMessage) {
		for _, r := range raw {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				t.Fatalf("%s: %v", dashboardFile, err)
			}
			for _, tg := range p.Targets {
				out = append(out, dashboardQuery{Panel: p.Title, Expr: grafanaVars.Replace(tg.Expr)})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	if len(out) == 0 {
		t.Fatalf("%s: no queries", dashboardFile)
	}
	return out
}

// seriesName matches the series a query names: the proxy's, kube-proxy's,
// client-go's, the Go and process collectors', Prometheus' own up.
var seriesName = regexp.MustCompile(`\b(?:ipvs_proxy|kubeproxy|rest_client|process|go)_[a-z0-9_]*[a-z0-9]\b|\bup\b`)
