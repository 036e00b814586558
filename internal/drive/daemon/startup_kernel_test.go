//go:build kernel

package daemon

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ipvs-proxy/ipvs-proxy/informers"
	"github.com/ipvs-proxy/ipvs-proxy/internal/config"
	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
)

// TestMain runs the test binary as `ipvs-proxy run` when
// STARTUP_CHILD_STATE_DIR is set (see runChild): TestKernelStartupGuardPass
// starts it in a node namespace.
func TestMain(m *testing.M) {
	if dir := os.Getenv("STARTUP_CHILD_STATE_DIR"); dir != "" {
		os.Exit(runChild(dir, os.Getenv("STARTUP_CHILD_MASTER")))
	}
	os.Exit(m.Run())
}

// runChild is `ipvs-proxy run --master MASTER --hostname-override a
// --state-dir DIR --cluster-cidr 10.244.0.0/16` without the health and
// metrics servers, until SIGTERM.
func runChild(dir, master string) int {
	c := config.Default()
	c.Master, c.HostnameOverride, c.StateDir = master, "a", dir
	c.HealthzBindAddress, c.MetricsBindAddress = "", ""
	c.Planning.ClusterCIDRs = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	log, _ := zap.NewDevelopment()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := Run(ctx, c, log); err != nil {
		fmt.Fprintln(os.Stderr, "run:", err)
		return 1
	}
	return 0
}

// TestKernelStartupGuardPass: `run` with an API server it cannot reach
// (its informer caches never sync, so no sync ever runs) still removes,
// at start, every address on kube-ipvs0 that what it knows offline
// protects — the node's own address, its default gateway, a Node of the
// cache, a deleted Node the cache remembers, the API server endpoint the
// cache recorded and the --master host — with the virtual servers on
// them; a VIP nothing protects stays, with its virtual server (issue 14,
// item 12: such addresses stayed until the caches synced, and if they were
// what cut the node off from the API server, forever).
func TestKernelStartupGuardPass(t *testing.T) {
	node := ktest.NewNode(t)
	node.AddClient(t, "cli") // eth0: 198.51.100.1/24
	node.Run(t, "ip", "route", "add", "default", "via", "198.51.100.254")
	node.Run(t, "ip", "link", "add", "kube-ipvs0", "type", "dummy")
	protected := []string{
		"198.51.100.1/32",   // this node's own address
		"198.51.100.254/32", // its default gateway
		"198.51.100.2/32",   // node b, in the cache
		"198.51.100.3/32",   // node c, deleted an hour ago, remembered
		"198.51.100.10/32",  // the API server endpoint the cache recorded
		"192.0.2.9/32",      // the --master host
	}
	var batch strings.Builder
	for _, a := range append(protected, "10.96.0.10/32") {
		fmt.Fprintf(&batch, "addr add %s dev kube-ipvs0\n", a)
	}
	node.RunInput(t, batch.String(), "ip", "-batch", "-")
	node.RunInput(t, "-A -t 198.51.100.2:6443 -s rr\n-A -t 10.96.0.10:80 -s rr\n", "ipvsadm", "-R")

	dir := t.TempDir()
	seen := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	cache := fmt.Sprintf(`{"updated": %q, "nodes": {"a": ["198.51.100.1"], "b": ["198.51.100.2"], "c": ["198.51.100.3"]},
		"lastSeen": {"c": %q}, "apiServers": ["198.51.100.10"]}`, seen, seen)
	if err := os.WriteFile(filepath.Join(dir, informers.NodeAddressFile), []byte(cache), 0o644); err != nil {
		t.Fatal(err)
	}

	logFile := filepath.Join(t.TempDir(), "run.log")
	out, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command("ip", "netns", "exec", node.Name, os.Args[0])
	cmd.Env = append(os.Environ(), "STARTUP_CHILD_STATE_DIR="+dir, "STARTUP_CHILD_MASTER=https://192.0.2.9:6443")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logFile)
			t.Logf("run's log:\n%s", b)
		}
	}()

	want := "10.96.0.10/32"
	var got string
	deadline := time.Now().Add(2 * time.Minute)
	for {
		got = strings.Join(strings.Fields(node.Run(t, "sh", "-c", "ip -o addr show dev kube-ipvs0 | awk '{print $4}' | sort")), " ")
		if got == want || time.Now().After(deadline) {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("run exited before the pass was seen (%v); kube-ipvs0: %s", err, got)
		case <-time.After(200 * time.Millisecond):
		}
	}
	if got != want {
		t.Fatalf("kube-ipvs0 holds %q, want %q: the protected addresses %v were not removed at start", got, want, protected)
	}
	ipvs := node.Run(t, "ipvsadm", "-S", "-n")
	if strings.Contains(ipvs, "198.51.100.2:6443") || !strings.Contains(ipvs, "10.96.0.10:80") {
		t.Errorf("IPVS after the startup pass:\n%s\nwant 10.96.0.10:80 kept, 198.51.100.2:6443 deleted", ipvs)
	}
	if b, _ := os.ReadFile(logFile); !strings.Contains(string(b), "startup guard pass done") || strings.Contains(string(b), "informer caches synced") {
		t.Errorf("run's log does not show the pass before any sync:\n%s", b)
	}
}
