//go:build !kernel

package prometheus_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/deploy"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// installCRDs applies prometheus-operator's ServiceMonitor and
// PrometheusRule CRDs to srv and waits until both are Established.
func installCRDs(ctx context.Context, t *testing.T, srv *apiserver.Server) {
	t.Helper()
	dir := operatorCRDs(t)
	a, err := deploy.NewApplier(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range []string{"monitoring.coreos.com_servicemonitors.yaml", "monitoring.coreos.com_prometheusrules.yaml"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		crd := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(b, &crd.Object); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if _, err := a.Apply(ctx, []*unstructured.Unstructured{crd}, false); err != nil {
			t.Fatal(err)
		}
		names = append(names, crd.GetName())
	}
	dyn := dynamic.NewForConfigOrDie(srv.Config())
	for _, name := range names {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			crd, err := dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			for _, c := range conds {
				if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("CRD %s not Established: %v", name, err)
		}
	}
}

// TestMonitoringComponentAgainstCRDs applies deploy/base with the
// monitoring component to the real API server with prometheus-operator's
// CRDs installed: the server validates the ServiceMonitor and the
// PrometheusRule against the CRDs' schemas (strict: an unknown field is an
// error), stores them, and warns about nothing; copies with one mistake
// each are refused, which proves the schemas are applied.
func TestMonitoringComponentAgainstCRDs(t *testing.T) {
	srv := apiserver.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	installCRDs(ctx, t, srv)

	objs := renderWithComponent(t)
	a, err := deploy.NewApplier(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	stored, err := a.Apply(ctx, objs, false)
	if err != nil {
		t.Fatal(err)
	}
	if w := a.Warnings(); len(w) > 0 {
		t.Errorf("the server warned: %q", w)
	}
	var kinds []string
	for _, o := range stored {
		if o.GetAPIVersion() == "monitoring.coreos.com/v1" || o.GetName() == "ipvs-proxy-metrics" {
			kinds = append(kinds, o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName())
		}
	}
	want := []string{"PrometheusRule ipvs-proxy/ipvs-proxy", "Service ipvs-proxy/ipvs-proxy-metrics", "ServiceMonitor ipvs-proxy/ipvs-proxy"}
	slices.Sort(kinds)
	if !slices.Equal(kinds, want) {
		t.Errorf("stored %q, want %q", kinds, want)
	}
	rules := find(t, stored, "PrometheusRule", "")
	groups, _, _ := unstructured.NestedSlice(rules.Object, "spec", "groups")
	t.Logf("stored PrometheusRule %s with %d group(s), ServiceMonitor and Service; CRDs of prometheus-operator %s", rules.GetName(), len(groups), operatorVersion)

	broken := []struct {
		name  string
		kind  string
		edit  func(o *unstructured.Unstructured) error
		check func(error) bool
	}{
		{"a rule's for is not a duration", "PrometheusRule", func(o *unstructured.Unstructured) error {
			gs, _, _ := unstructured.NestedSlice(o.Object, "spec", "groups")
			rs := gs[0].(map[string]any)["rules"].([]any)
			rs[0].(map[string]any)["for"] = "2 minutes"
			return unstructured.SetNestedSlice(o.Object, gs, "spec", "groups")
		}, apierrors.IsInvalid},
		{"a misspelt endpoint field", "ServiceMonitor", func(o *unstructured.Unstructured) error {
			eps, _, _ := unstructured.NestedSlice(o.Object, "spec", "endpoints")
			eps[0].(map[string]any)["intervall"] = "30s"
			return unstructured.SetNestedSlice(o.Object, eps, "spec", "endpoints")
		}, func(err error) bool {
			return strings.Contains(fmt.Sprint(err), "intervall: field not declared in schema")
		}},
		{"a relabeling action that does not exist", "ServiceMonitor", func(o *unstructured.Unstructured) error {
			eps, _, _ := unstructured.NestedSlice(o.Object, "spec", "endpoints")
			eps[0].(map[string]any)["relabelings"].([]any)[0].(map[string]any)["action"] = "rename"
			return unstructured.SetNestedSlice(o.Object, eps, "spec", "endpoints")
		}, apierrors.IsInvalid},
	}
	for _, b := range broken {
		t.Run(b.name, func(t *testing.T) {
			o := find(t, objs, b.kind, "").DeepCopy()
			if err := b.edit(o); err != nil {
				t.Fatal(err)
			}
			_, err := a.Apply(ctx, []*unstructured.Unstructured{o}, true)
			if err == nil || !b.check(err) {
				t.Fatalf("broken %s accepted or refused for another reason: %v", b.kind, err)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// TestMonitoringComponentReferences checks what no schema can, for every
// kustomization of deploy/ with the component added to it as
// docs/operations.md says: the component's Service is in the DaemonSet's
// namespace, selects its pods and names one of its container ports, the
// ServiceMonitor selects that Service in its namespace and port, and the
// Service carries the job label kube-proxy's dashboards and alerts select
// (job="kube-proxy").
func TestMonitoringComponentReferences(t *testing.T) {
	for _, k := range deploy.Kustomizations {
		t.Run(k, func(t *testing.T) { checkReferences(t, renderKustomizationWithComponent(t, k)) })
	}
}

func checkReferences(t *testing.T, objs []*unstructured.Unstructured) {
	ds := find(t, objs, "DaemonSet", "")
	svc := find(t, objs, "Service", "ipvs-proxy-metrics")
	sm := find(t, objs, "ServiceMonitor", "")

	if svc.GetNamespace() != ds.GetNamespace() {
		t.Errorf("Service %s/%s selects pods in its own namespace; the DaemonSet's are in %s", svc.GetNamespace(), svc.GetName(), ds.GetNamespace())
	}
	podLabels := labelsOf(t, ds, "spec", "template", "metadata", "labels")
	for k, v := range labelsOf(t, svc, "spec", "selector") {
		if podLabels[k] != v {
			t.Errorf("Service selector %s=%s does not match the DaemonSet's pod labels %v", k, v, podLabels)
		}
	}
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	containers, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
	cports := map[string]string{} // name: port, as numbers decode (float64 from JSON)
	for _, c := range containers {
		ps, _, _ := unstructured.NestedSlice(c.(map[string]any), "ports")
		for _, p := range ps {
			m := p.(map[string]any)
			cports[fmt.Sprint(m["name"])] = fmt.Sprint(m["containerPort"])
		}
	}
	svcPorts := map[string]bool{}
	for _, p := range ports {
		m := p.(map[string]any)
		svcPorts[fmt.Sprint(m["name"])] = true
		if tp := fmt.Sprint(m["targetPort"]); cports[tp] != fmt.Sprint(m["port"]) {
			t.Errorf("Service port %v targets %q: container ports %v", m["port"], tp, cports)
		}
	}
	svcLabels := labelsOf(t, svc, "metadata", "labels")
	for k, v := range labelsOf(t, sm, "spec", "selector", "matchLabels") {
		if svcLabels[k] != v {
			t.Errorf("ServiceMonitor selects %s=%s; the Service's labels are %v", k, v, svcLabels)
		}
	}
	// prometheus-operator: no namespaceSelector is the ServiceMonitor's own
	// namespace; any: true is every namespace.
	nss, _, _ := unstructured.NestedStringSlice(sm.Object, "spec", "namespaceSelector", "matchNames")
	anyNS, _, _ := unstructured.NestedBool(sm.Object, "spec", "namespaceSelector", "any")
	if len(nss) == 0 {
		nss = []string{sm.GetNamespace()}
	}
	if !anyNS && !slices.Contains(nss, svc.GetNamespace()) {
		t.Errorf("ServiceMonitor %s/%s scrapes namespaces %v, not the Service's %s", sm.GetNamespace(), sm.GetName(), nss, svc.GetNamespace())
	}
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	for _, e := range eps {
		if p, _ := e.(map[string]any)["port"].(string); !svcPorts[p] {
			t.Errorf("ServiceMonitor endpoint port %q is not a port of the Service (%v)", p, svcPorts)
		}
	}
	jobLabel, _, _ := unstructured.NestedString(sm.Object, "spec", "jobLabel")
	if svcLabels[jobLabel] != "kube-proxy" {
		t.Errorf("ServiceMonitor jobLabel %q gives job=%q, want kube-proxy (kubernetes-mixin's kubeProxySelector)", jobLabel, svcLabels[jobLabel])
	}
}
