//go:build kernel

package cluster_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// proxyProc is one node's `ipvs-proxy run`, its own state directory and log.
type proxyProc struct {
	cmd  *exec.Cmd
	log  string
	done chan error
}

// startProxy runs `ip netns exec NODE ipvs-proxy run` as a DaemonSet's pod
// would on that node: its own Node name, state directory and the cluster
// CIDR; it is stopped (SIGTERM) at the end of the test, its log's tail
// printed if the test failed.
func startProxy(t *testing.T, n *bedNode, bin, kubeconfig string) *proxyProc {
	t.Helper()
	dir := t.TempDir()
	p := &proxyProc{log: filepath.Join(dir, "proxy.log"), done: make(chan error, 1)}
	f, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command("ip", "netns", "exec", n.ns.Name, bin, "run",
		"--kubeconfig", kubeconfig, "--hostname-override", n.name, "--cluster-cidr", clusterCIDR.String(),
		"--state-dir", filepath.Join(dir, "state"), "--sync-period", "30s",
		"--protected-cidrs", lanPrefix.String(),
		"--log-level", "debug", "--log-format", "console")
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait(); f.Close() }()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(30 * time.Second):
				_ = p.cmd.Process.Kill()
				<-p.done
			}
		}
		if t.Failed() {
			b, _ := os.ReadFile(p.log)
			lines := strings.Split(string(b), "\n")
			t.Logf("%s: proxy log (last 80 lines):\n%s", n.name, strings.Join(lines[max(0, len(lines)-80):], "\n"))
		}
	})
	return p
}

// waitSynced waits for the proxy's first full sync.
func (p *proxyProc) waitSynced(t *testing.T, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		b, _ := os.ReadFile(p.log)
		if strings.Contains(string(b), "first full sync applied") {
			return
		}
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("the proxy exited before its first sync: %v\n%s", err, b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no first full sync after %v:\n%s", timeout, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
