package chart

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/deploy"
)

// withMonitoring is deploy/base with the monitoring component, the
// kustomization test/e2e/prometheus validates against the CRDs.
var withMonitoring = filepath.Join("..", "prometheus", "testdata", "with-monitoring")

// choices are the chart's values for each kustomization of deploy/.
var choices = []struct {
	name          string
	kustomization string
	namespace     string
	values        Values
}{
	{"standalone", deploy.Base, "ipvs-proxy", Values{"mode": "standalone"}},
	{"replace-kube-proxy", deploy.ReplaceKubeProxy, "kube-system", Values{"mode": "replace-kube-proxy"}},
	// The chart's default mode.
	{"migrate-node-by-node", deploy.MigrateNodeByNode, "kube-system", Values{}},
	{"monitoring", withMonitoring, "ipvs-proxy", Values{"mode": "standalone", "monitoring.enabled": "true"}},
}

func helmOrSkip(t *testing.T) Helm {
	t.Helper()
	h, ok, err := FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Skip("IPVS_PROXY_HELM is not set: make test-chart builds helm and runs this test")
	}
	return h
}

func render(t *testing.T, h Helm, namespace string, v Values) []*unstructured.Unstructured {
	t.Helper()
	objs, err := h.Template(namespace, v)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func kustomize(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	if !filepath.IsAbs(path) && strings.HasPrefix(path, "..") {
		abs, err := filepath.Abs(path)
		if err != nil {
			t.Fatal(err)
		}
		path = abs
	}
	objs, err := deploy.Build(path)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// TestChartLint runs `helm lint --strict` for every mode.
func TestChartLint(t *testing.T) {
	h := helmOrSkip(t)
	for _, c := range choices {
		t.Run(c.name, func(t *testing.T) {
			out, err := h.Lint(c.namespace, c.values)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(out), "0 chart(s) failed") {
				t.Errorf("helm lint:\n%s", out)
			}
		})
	}
}

// TestChartMatchesKustomize renders the chart and the kustomization of the
// same choice and requires the same objects: the DaemonSet field by field,
// RBAC, ServiceAccount, ConfigMaps, and the monitoring objects.
func TestChartMatchesKustomize(t *testing.T) {
	h := helmOrSkip(t)
	for _, c := range choices {
		t.Run(c.name, func(t *testing.T) {
			chart := render(t, h, c.namespace, c.values)
			diffs, err := Diff(kustomize(t, c.kustomization), chart)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range diffs {
				t.Error(d)
			}
			if len(diffs) == 0 {
				t.Logf("%s: the chart and %s render the same %d objects", c.name, c.kustomization, len(chart))
			}
		})
	}
}

// TestDiffFindsADifferentDaemonSet proves TestChartMatchesKustomize can
// fail: a chart whose DaemonSet surges, runs without tolerations, or
// requests other resources differs from the overlay, and Diff says where.
func TestDiffFindsADifferentDaemonSet(t *testing.T) {
	h := helmOrSkip(t)
	want := kustomize(t, deploy.ReplaceKubeProxy)
	for _, tc := range []struct {
		set  Values
		says string
	}{
		{Values{"updateStrategy.rollingUpdate.maxSurge": "1"}, "maxSurge"},
		{Values{"tolerations": "null"}, "tolerations"},
		{Values{"resources.requests.cpu": "50m"}, "cpu"},
		{Values{"priorityClassName": "system-cluster-critical"}, "priorityClassName"},
	} {
		tc.set["mode"] = "replace-kube-proxy"
		diffs, err := Diff(want, render(t, h, "kube-system", tc.set))
		if err != nil {
			t.Fatal(err)
		}
		joined := strings.Join(diffs, "\n")
		if len(diffs) != 1 || !strings.HasPrefix(joined, "DaemonSet kube-system/ipvs-proxy") || !strings.Contains(joined, tc.says) {
			t.Errorf("--set %v: Diff = %q, want one DaemonSet difference in %s", tc.set, diffs, tc.says)
		}
	}
}

// TestChartServerSideDryRun applies every mode's objects (without the
// monitoring CRs, whose CRDs test/e2e/prometheus installs) with server-side
// apply, dry-run=All and strict field validation: the real kube-apiserver
// decodes, defaults, validates and admits each, without a warning.
func TestChartServerSideDryRun(t *testing.T) {
	h := helmOrSkip(t)
	srv := apiserver.Shared(t)
	a, err := deploy.NewApplier(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range choices[:3] {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			// The release's namespace exists before helm installs into it.
			ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace",
				"metadata": map[string]any{"name": c.namespace}}}
			if _, err := a.Apply(ctx, []*unstructured.Unstructured{ns}, false); err != nil {
				t.Fatal(err)
			}
			objs := render(t, h, c.namespace, c.values)
			answered, err := a.Apply(ctx, objs, true)
			if err != nil {
				t.Fatal(err)
			}
			if w := a.Warnings(); len(w) > 0 {
				t.Errorf("the server warned: %q", w)
			}
			t.Logf("%s: %d objects admitted", c.name, len(answered))
		})
	}
}

// TestChartRefusesWrongValues: a mistake in the values is an error that
// names the value, not a broken install.
func TestChartRefusesWrongValues(t *testing.T) {
	h := helmOrSkip(t)
	for _, tc := range []struct {
		namespace string
		set       Values
		says      string
	}{
		{"kube-system", Values{"mode": "replace"}, `mode "replace": must be one of migrate-node-by-node, replace-kube-proxy, standalone`},
		{"ipvs-proxy", Values{"mode": "replace-kube-proxy"}, `install the release there (helm -n kube-system), not in "ipvs-proxy"`},
		{"kube-system", Values{"kubeProxy.distribution": "eks"}, `kubeProxy.distribution "eks": must be one of kubeadm`},
		{"ipvs-proxy", Values{"mode": "standalone", "apiServer.host": "10.0.0.1"}, "apiServer: set both host and port"},
	} {
		_, err := h.Template(tc.namespace, tc.set)
		if err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("helm template -n %s --set %v: %v, want an error saying %q", tc.namespace, tc.set, err, tc.says)
		}
	}
}
