//go:build !kernel

package prometheus_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/deploy"
)

// The prometheus-operator release whose CRDs the component is validated
// against: its Go module holds them under example/prometheus-operator-crd/.
const (
	operatorModule  = "github.com/prometheus-operator/prometheus-operator"
	operatorVersion = "v0.85.0"
)

// operatorCRDs downloads prometheus-operator's Go module at operatorVersion
// through the Go module proxy (`go mod download`, checked against the
// checksum database; a no-op once it is in the module cache) and returns
// its CRD directory.
func operatorCRDs(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", operatorModule+"@"+operatorVersion)
	cmd.Dir = t.TempDir() // outside any module: nothing is added to go.mod
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	out, err := cmd.Output()
	var m struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &m); jerr != nil || m.Error != "" || err != nil {
		t.Fatalf("go mod download %s@%s: %v %s %v", operatorModule, operatorVersion, err, m.Error, jerr)
	}
	return filepath.Join(m.Dir, "example", "prometheus-operator-crd")
}

// renderWithComponent renders deploy/base with the monitoring component
// (testdata/with-monitoring), as an overlay listing it under `components:`
// does.
func renderWithComponent(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	path, err := filepath.Abs(filepath.Join("testdata", "with-monitoring"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := deploy.Build(path)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// renderKustomizationWithComponent renders kustomization k of deploy/ (a
// deploy.Kustomizations path) with the monitoring component listed under
// its `components:`, as an operator adds it: in a copy of deploy/, so the
// kustomization's own namespace and patches apply to the component.
func renderKustomizationWithComponent(t *testing.T, k string) []*unstructured.Unstructured {
	t.Helper()
	src, err := deploy.Dir()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "deploy")
	if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, k, "kustomization.yaml")
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "\ncomponents:") {
		t.Fatalf("%s lists components already; add the monitoring component to that list", file)
	}
	rel, err := filepath.Rel(filepath.Join(dir, k), filepath.Join(dir, "components", "monitoring"))
	if err != nil {
		t.Fatal(err)
	}
	raw = append(raw, "\ncomponents:\n- "+rel+"\n"...)
	if err := os.WriteFile(file, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	objs, err := deploy.Build(filepath.Join(dir, k))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// find returns the one object of kind in objs, or fails t.
func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	var found *unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind && (name == "" || o.GetName() == name) {
			if found != nil {
				t.Fatalf("two %s objects rendered: %s and %s", kind, found.GetName(), o.GetName())
			}
			found = o
		}
	}
	if found == nil {
		t.Fatalf("no %s %s rendered", kind, name)
	}
	return found
}

// writeRuleFile writes the spec of the component's PrometheusRule as a
// Prometheus rule file (what the operator generates from it) into dir.
func writeRuleFile(t *testing.T, dir string) string {
	t.Helper()
	rule := find(t, renderWithComponent(t), "PrometheusRule", "")
	groups, ok, err := unstructured.NestedSlice(rule.Object, "spec", "groups")
	if err != nil || !ok || len(groups) == 0 {
		t.Fatalf("PrometheusRule %s has no spec.groups (%v)", rule.GetName(), err)
	}
	b, err := yaml.Marshal(map[string]any{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "ipvs-proxy-rules.yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// labelsOf reads a string map at path of o.
func labelsOf(t *testing.T, o *unstructured.Unstructured, path ...string) map[string]string {
	t.Helper()
	m, _, err := unstructured.NestedStringMap(o.Object, path...)
	if err != nil {
		t.Fatalf("%s %s %s: %v", o.GetKind(), o.GetName(), strings.Join(path, "."), err)
	}
	return m
}
