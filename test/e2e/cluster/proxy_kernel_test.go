//go:build kernel

package cluster_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/harness"
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
	return startProxyIn(t, n, bin, kubeconfig, filepath.Join(dir, "state"), filepath.Join(dir, "proxy.log"))
}

// startProxyIn is startProxy with its state directory and log given: a
// restarted proxy keeps its predecessor's state directory, as a
// DaemonSet's hostPath does.
func startProxyIn(t *testing.T, n *bedNode, bin, kubeconfig, stateDir, log string) *proxyProc {
	t.Helper()
	p := &proxyProc{stateDir: stateDir}
	p.Process = harness.StartProxy(t, n.ns.NS, harness.Proxy{Bin: bin, Kubeconfig: kubeconfig, Node: n.name,
		ClusterCIDR: clusterCIDR.String(), SyncPeriod: 30 * time.Second, StateDir: stateDir, Log: log,
		Flags: []string{"--protected-cidrs", lanPrefix.String()}})
	// Runs before Start's own cleanup, which kills what still runs.
	t.Cleanup(func() { _, _ = p.Stop(30 * time.Second) })
	return p
}

// restartProxy is a kube-proxy pod deleted with a zero grace period and
// its DaemonSet's replacement: SIGKILL, then a new `ipvs-proxy run` with
// the same state directory (its log beside the first); it does not wait
// for the new one's sync. The new process lives until TestClusterGuest
// ends.
func (b *bed) restartProxy(t *testing.T, n *bedNode) {
	t.Helper()
	if err := n.proxy.Kill(30 * time.Second); err != nil {
		t.Fatalf("%s: kill the proxy: %v", n.name, err)
	}
	n.restarts++
	log := filepath.Join(filepath.Dir(n.proxy.stateDir), fmt.Sprintf("proxy-%d.log", n.restarts))
	n.proxy = startProxyIn(b.t, n, b.proxyBin, b.proxyKC, n.proxy.stateDir, log)
}

// errNotSynced is waitSynced's condition before the first full sync.
var errNotSynced = errors.New("no first full sync yet")

// waitSynced waits for the proxy's first full sync.
func (p *proxyProc) waitSynced(t *testing.T, timeout time.Duration) {
	t.Helper()
	harness.WaitFor(t, "the proxy's first full sync", timeout, 200*time.Millisecond, func() error {
		if p.OutputHas("first full sync applied") {
			return nil
		}
		if exited, err := p.Wait(0); exited {
			return fmt.Errorf("%w: the proxy exited before it: %v\n%s", harness.ErrGiveUp, err, p.Tail(80))
		}
		// The log's tail is printed at the end of a failed test.
		return errNotSynced
	})
}
