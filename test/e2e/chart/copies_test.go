package chart

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// The chart cannot read files outside its directory, so it holds copies of
// three files of deploy/. These tests need no helm and run in make test-e2e:
// a change to one side only fails them.

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

const repo = "../../.."

// TestChartConfigIsTheBases: values.yaml's config is deploy/base/config.yaml.
func TestChartConfigIsTheBases(t *testing.T) {
	var values struct{ Config map[string]any }
	readYAML(t, filepath.Join(repo, "charts/ipvs-proxy/values.yaml"), &values)
	var base map[string]any
	readYAML(t, filepath.Join(repo, "deploy/base/config.yaml"), &base)
	if d := cmp.Diff(base, values.Config); d != "" {
		t.Errorf("charts/ipvs-proxy/values.yaml config differs from deploy/base/config.yaml (-base +chart):\n%s", d)
	}
}

// TestChartAlertsAreTheComponents: the chart's PrometheusRule spec is the
// monitoring component's.
func TestChartAlertsAreTheComponents(t *testing.T) {
	var chart map[string]any
	readYAML(t, filepath.Join(repo, "charts/ipvs-proxy/files/prometheus-rule-spec.yaml"), &chart)
	var component struct{ Spec map[string]any }
	readYAML(t, filepath.Join(repo, "deploy/components/monitoring/prometheusrule.yaml"), &component)
	if d := cmp.Diff(component.Spec, chart); d != "" {
		t.Errorf("charts/ipvs-proxy/files/prometheus-rule-spec.yaml differs from the spec of deploy/components/monitoring/prometheusrule.yaml (-component +chart):\n%s", d)
	}
}

// TestChartDashboardIsTheComponents: the chart's Grafana dashboard is the
// monitoring component's, byte for byte.
func TestChartDashboardIsTheComponents(t *testing.T) {
	chart, err := os.ReadFile(filepath.Join(repo, "charts/ipvs-proxy/files/dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	component, err := os.ReadFile(filepath.Join(repo, "deploy/components/monitoring/dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if string(chart) != string(component) {
		t.Error("charts/ipvs-proxy/files/dashboard.json differs from deploy/components/monitoring/dashboard.json: copy it")
	}
}
