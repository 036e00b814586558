//go:build kernel

package node_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/node"
	"github.com/ipvs-proxy/ipvs-proxy/test/vmtest"
)

// repoRoot is the repository as the guest test sees it from its package
// directory (the host's root, read-only with a tmpfs overlay).
const repoRoot = "../../.."

// docSettle is how long the traffic goes on after each block, once the
// node is served as the step says.
const docSettle = 5 * time.Second

// blockTimeout bounds one block of the guide (rollout status waits for a
// pod to start; nothing else waits).
const blockTimeout = 5 * time.Minute

// TestMigrationDocGuest is the migration-doc scenario's node: kubeadm's
// kube-proxy serves the web NodePort Service while a client on the node
// sends requests to its ClusterIP and NodePort; then each step of
// node.MigrationGuide runs its block of docs/migration.md as written, with
// bash -euo pipefail in a directory holding a copy of deploy/, kubectl
// v1.34 on PATH, KUBECONFIG the admin's and NODE this node's name. After
// each block the node must be served by the step's proxy: its pod Ready
// on the node and the other's gone, its process running and the other's
// not, /healthz 200. Every request of every step must succeed.
//
// The blocks run on the node rather than on the host: kubectl reaches the
// API server from here as from an operator's machine, the "on the node"
// lines of step 5 really run on a node, and the traffic's phases follow
// the blocks on one clock.
func TestMigrationDocGuest(t *testing.T) {
	ctx := context.Background()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docs", "migration.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := node.ParseGuide(string(raw))
	if err != nil {
		t.Fatal(err)
	}
	script, err := node.GuideScript(blocks, node.MigrationGuide)
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	if err := os.CopyFS(filepath.Join(work, "deploy"), os.DirFS(filepath.Join(repoRoot, "deploy"))); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(work, ".bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(vmtest.GuestEnv(t, node.EnvKubectl), filepath.Join(bin, "kubectl")); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "KUBECONFIG="+vmtest.GuestEnv(t, node.EnvAdminKubeconfig),
		"PATH="+bin+":"+os.Getenv("PATH"), "HOME="+work, "NODE="+node.NodeName)

	b := startNode(t, nil)
	tr := kubeProxyUnderTraffic(ctx, b)
	defer tr.finish(t)
	for i, step := range node.MigrationGuide {
		blk := script[i]
		phase := fmt.Sprintf("%d:%s", i+1, step.Block)
		tr.setPhase(phase)
		runBlock(ctx, t, work, env, blk)
		servedBy(ctx, b, step.Serves)
		time.Sleep(docSettle)
		b.step(fmt.Sprintf("block %s (docs/migration.md:%d), node served by %s; %s", blk.Name, blk.Line, step.Serves, tr.counted(t, phase)))
	}
	tr.finish(t)
	b.step("traffic")
}

// counted is phase's requests so far, by target; it fails t at once for
// a failed one, so a walk cut short still says where traffic failed.
func (tr *traffic) counted(t *testing.T, phase string) string {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var parts []string
	for _, target := range tr.targets {
		c := tr.counts[phase+" "+target]
		parts = append(parts, fmt.Sprintf("%s %d ok %d failed", target, c.ok, c.failed))
		if c.failed > 0 {
			t.Errorf("%s: %d of %d requests to %s failed, the first: %v", phase, c.failed, c.ok+c.failed, target, c.firstErr)
		}
	}
	return strings.Join(parts, ", ")
}

// runBlock runs one block of the guide in dir and fails t when it exits
// non-zero, with its trace.
func runBlock(ctx context.Context, t *testing.T, dir string, env []string, blk node.Block) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, blockTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euxo", "pipefail", "-c", blk.Script)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("docs/migration.md:%d, block %s (%s) failed: %v\n%s", blk.Line, blk.Name, blk.Section, err, out)
	}
	t.Logf("block %s (docs/migration.md:%d):\n%s", blk.Name, blk.Line, out)
}

// proxyLabels selects each proxy's pods: kubeadm's kube-proxy DaemonSet's
// and the overlays' ipvs-proxy DaemonSet's.
var proxyLabels = map[node.Proxy]string{
	node.KubeProxy: "k8s-app=kube-proxy",
	node.IPVSProxy: "app.kubernetes.io/name=ipvs-proxy",
}

// servedBy waits until want serves the node and the other proxy is gone:
// want's one pod on the node Ready and not terminating, none of the
// other's, want's process running and the other's not, and /healthz 200.
func servedBy(ctx context.Context, b *bed, want node.Proxy) {
	b.t.Helper()
	client := &http.Client{Timeout: 3 * time.Second}
	b.wait("node "+node.NodeName+" served by "+string(want)+" alone", blockTimeout, 500*time.Millisecond, func() (bool, error) {
		for proxy, sel := range proxyLabels {
			pods, err := b.c.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: sel,
				FieldSelector: "spec.nodeName=" + node.NodeName})
			if err != nil {
				return false, err
			}
			switch {
			case proxy != want && len(pods.Items) > 0:
				return false, fmt.Errorf("%s pod %s still on the node: %s", proxy, pods.Items[0].Name, podSummary(&pods.Items[0]))
			case proxy == want && len(pods.Items) != 1:
				return false, fmt.Errorf("%d %s pods on the node", len(pods.Items), proxy)
			case proxy == want && (!podReady(&pods.Items[0]) || pods.Items[0].DeletionTimestamp != nil):
				return false, fmt.Errorf("%s pod %s: %s", proxy, pods.Items[0].Name, podSummary(&pods.Items[0]))
			}
		}
		procs, err := processNames()
		if err != nil {
			return false, err
		}
		for proxy := range proxyLabels {
			if procs[string(proxy)] != (proxy == want) {
				return false, fmt.Errorf("process %s running: %v", proxy, procs[string(proxy)])
			}
		}
		err = get(client, "http://127.0.0.1:10256/healthz")
		return err == nil, err
	})
}

// processNames is the set of the node's process names (/proc/PID/comm).
func processNames() (map[string]bool, error) {
	comms, err := filepath.Glob("/proc/[0-9]*/comm")
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, c := range comms {
		raw, err := os.ReadFile(c)
		if err != nil {
			continue // the process ended
		}
		names[strings.TrimSpace(string(raw))] = true
	}
	return names, nil
}
