//go:build !kernel

package prometheus_test

import (
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestDashboardHasTheMixinsQueries: every panel of kubernetes-mixin's
// kube-proxy dashboard (testdata/kube-proxy-dashboard.yaml) is in the
// component's dashboard under its title with the same query.
func TestDashboardHasTheMixinsQueries(t *testing.T) {
	b, err := os.ReadFile("testdata/kube-proxy-dashboard.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var mixin struct {
		Queries []struct{ Panel, Expr, Want string }
	}
	if err := yaml.UnmarshalStrict(b, &mixin); err != nil {
		t.Fatal(err)
	}
	ours := map[string]bool{}
	for _, q := range dashboardQueries(t) {
		ours[q.Panel+"\x00"+q.Expr] = true
	}
	for _, q := range mixin.Queries {
		// The request rates by code are one panel of four targets in the
		// mixin's dashboard, as in ours.
		panel, _, _ := strings.Cut(q.Panel, " (")
		if !ours[panel+"\x00"+q.Expr] {
			t.Errorf("panel %q: the dashboard lacks kubernetes-mixin's query %s", panel, q.Expr)
		}
	}
}
