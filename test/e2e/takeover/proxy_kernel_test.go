//go:build kernel

package takeover

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/harness"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/kubeproxy"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// ipvsProxy is one `ipvs-proxy run` in the node namespace.
type ipvsProxy struct{ *ktest.Process }

// proxyConfig writes the configuration docs/migration.md tells operators to
// use: kube-proxy's own config.conf from its ConfigMap, with
// clientConnection.kubeconfig pointing at the proxy's credentials (deploy/
// base's ServiceAccount token, the pod's in-cluster ones): with --config the
// file wins over --kubeconfig, as in kube-proxy; and mode: ipvs, as the
// guide has operators of an iptables-mode node set it.
func (b *bed) proxyConfig() string {
	b.t.Helper()
	in, err := os.ReadFile(b.kubeProxyConfig)
	if err != nil {
		b.t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^  kubeconfig: .*\n`)
	if !re.Match(in) {
		b.t.Fatalf("kube-proxy's config.conf has no clientConnection.kubeconfig line:\n%s", in)
	}
	path := filepath.Join(b.dir, "ipvs-proxy-config.yaml")
	out := re.ReplaceAllLiteral(in, []byte("  kubeconfig: "+b.proxyKubeconfig+"\n"))
	out = regexp.MustCompile(`(?m)^mode: .*$`).ReplaceAllLiteral(out, []byte("mode: ipvs"))
	if err := os.WriteFile(path, out, 0o644); err != nil {
		b.t.Fatal(err)
	}
	return path
}

// startProxy runs the DaemonSet's command, `ipvs-proxy run --config FILE
// --hostname-override NODE`, plus what the pod has and the node namespace
// has not: --state-dir (the pod's hostPath; the credentials are in the file,
// proxyConfig), and JSON debug logs for the test to read (every sync's
// "sync applied" record).
func (b *bed) startProxy(config, log string) *ipvsProxy {
	b.t.Helper()
	return &ipvsProxy{harness.StartProxy(b.t, b.node.NS, harness.Proxy{Bin: b.proxyBin, Config: config, Node: thisNode,
		StateDir: filepath.Join(b.dir, "state"), Log: filepath.Join(b.dir, log), LogFormat: "json"})}
}

// metrics reads ipvs-proxy's /metrics (the address of kube-proxy's file).
func (b *bed) proxyMetrics() (kubeproxy.Metrics, error) {
	code, body, err := b.node.HTTPGet(kubeproxy.MetricsAddress, "/metrics", 10*time.Second)
	if err != nil {
		return nil, err
	}
	if code != 200 {
		return nil, fmt.Errorf("ipvs-proxy /metrics: status %d", code)
	}
	return kubeproxy.ParseMetrics(body)
}

// healthzFree waits until nothing listens on the healthz port: what the
// DaemonSet's init container wait-for-other-proxy does before ipvs-proxy
// starts.
func (b *bed) healthzFree(timeout time.Duration) time.Duration {
	b.t.Helper()
	start := time.Now()
	for {
		err := b.node.Do(func() error {
			c, err := net.DialTimeout("tcp", kubeproxy.HealthzAddress, time.Second)
			if err == nil {
				c.Close()
			}
			return err
		})
		if err != nil {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			b.t.Fatalf("%s still listening %v after the old proxy's SIGTERM", kubeproxy.HealthzAddress, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// syncLine is one "sync applied" log line of ipvs-proxy (JSON).
type syncLine map[string]any

// syncLines returns ipvs-proxy's "sync applied" log lines.
func (p *ipvsProxy) syncLines() []syncLine {
	var out []syncLine
	sc := bufio.NewScanner(strings.NewReader(p.Output()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m syncLine
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "sync applied" {
			out = append(out, m)
		}
	}
	return out
}
