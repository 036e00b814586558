//go:build kernel

package cluster_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// proxyProc is one node's `ipvs-proxy run`, its own state directory and log.
type proxyProc struct {
	*ktest.Process
	// stateDir is its --state-dir (node-addresses.json, which `recover` reads offline).
	stateDir string
}

// startProxy runs `ip netns exec NODE ipvs-proxy run` as a DaemonSet's pod
// would on that node: its own Node name, state directory and the cluster
// CIDR; it is stopped (SIGTERM) at the end of the test, its log's tail
// printed if the test failed.
func startProxy(t *testing.T, n *bedNode, bin, kubeconfig string) *proxyProc {
	t.Helper()
	dir := t.TempDir()
	p := &proxyProc{stateDir: filepath.Join(dir, "state")}
	p.Process = n.ns.Start(t, filepath.Join(dir, "proxy.log"), bin, "run",
		"--kubeconfig", kubeconfig, "--hostname-override", n.name, "--cluster-cidr", clusterCIDR.String(),
		"--state-dir", p.stateDir, "--sync-period", "30s",
		"--protected-cidrs", lanPrefix.String(),
		"--log-level", "debug", "--log-format", "console")
	// Runs before Start's own cleanup, which kills what still runs.
	t.Cleanup(func() { _, _ = p.Stop(30 * time.Second) })
	return p
}

// waitSynced waits for the proxy's first full sync.
func (p *proxyProc) waitSynced(t *testing.T, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if p.OutputHas("first full sync applied") {
			return
		}
		if exited, err := p.Wait(0); exited {
			t.Fatalf("the proxy exited before its first sync: %v\n%s", err, p.Tail(80))
		}
		if time.Now().After(deadline) {
			t.Fatalf("no first full sync after %v:\n%s", timeout, p.Tail(80))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
