//go:build !kernel

package prometheus_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/gobuild"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/guest"
)

// TestPrometheusVM starts an API server on the host and runs
// TestPrometheusGuest in the test VM against it: Debian's prometheus
// (installed on the host by scripts/install-prometheus.sh; the VM runs the
// host's files over 9p) scrapes `ipvs-proxy run` and evaluates
// kubernetes-mixin's kube-proxy queries and alerts and the component's
// rules. `make test-prometheus` runs it (PROMETHEUS_VM=1).
func TestPrometheusVM(t *testing.T) {
	if os.Getenv("PROMETHEUS_VM") == "" {
		t.Skip("boots the test VM: `make test-prometheus` runs it (PROMETHEUS_VM=1)")
	}
	var bins [2]string
	for i, name := range []string{"prometheus", "promtool"} {
		p, err := exec.LookPath(name)
		if err != nil {
			t.Fatalf("%s: %v (scripts/install-prometheus.sh installs Debian's prometheus package)", name, err)
		}
		bins[i] = p
	}
	dir := t.TempDir()
	componentRules := writeRuleFile(t, dir)
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	mixinRules := filepath.Join(wd, "testdata", "kube-proxy-alerts.yaml")
	// promtool parses every expression and template first: a rule file
	// Prometheus would refuse fails here, before the VM boots.
	if out, err := exec.Command(bins[1], "check", "rules", mixinRules, componentRules).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	} else {
		t.Logf("promtool check rules:\n%s", strings.TrimSpace(string(out)))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	srv := apiserver.Start(t)
	// The proxy dials 127.0.0.1:PORT in its node namespace, relayed to the
	// host by the guest test.
	adminKC, proxyKC := srv.WriteGuestKubeconfigs(t, dir, srv.Config())
	guest.Run(ctx, t, dir, guest.Suite{Test: "TestPrometheusGuest", Timeout: 10 * time.Minute, Port: srv.Port,
		Env: []string{"PROM_KUBECONFIG_ADMIN=" + adminKC, "PROM_KUBECONFIG_PROXY=" + proxyKC, "PROM_PROXY_BIN=" + gobuild.Proxy(t, dir),
			"PROM_BIN=" + bins[0], "PROM_RULES=" + mixinRules + "," + componentRules}})
}
