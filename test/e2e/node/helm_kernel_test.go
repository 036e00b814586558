//go:build kernel

package node_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/node"
	"github.com/ipvs-proxy/ipvs-proxy/test/vmtest"
)

// TestHelmGuest is the helm scenario's node: the migrate scenario with
// docs/install.md's Helm commands in place of the overlay. kubeadm's
// kube-proxy serves the web NodePort Service; a client on the node sends
// requests to its ClusterIP and NodePort the whole time while:
//
//   - replace: kube-proxy's DaemonSet is deleted and the chart installed
//     with `helm install ipvs-proxy CHART -n kube-system --set
//     mode=replace-kube-proxy`, a real helm against the test API server;
//   - rollout: `helm upgrade --reuse-values --set image.tag=NEW` rolls the
//     DaemonSet to the new version.
//
// Every request of every phase must succeed; the counts are in the output.
func TestHelmGuest(t *testing.T) {
	ctx := context.Background()
	b := startNode(t, nil)
	tr := kubeProxyUnderTraffic(ctx, b)
	defer tr.finish(t)

	tr.setPhase("replace")
	deleteKubeProxy(ctx, b)
	chart := vmtest.GuestEnv(t, node.EnvChart)
	runHelm(b, "install", "ipvs-proxy", chart, "-n", "kube-system", "--set", "mode=replace-kube-proxy")
	first := waitProxy(ctx, b, "")
	b.step("helm install, ipvs-proxy pod " + first.Name + " Ready")
	time.Sleep(settle)

	tr.setPhase("rollout")
	rollout := vmtest.GuestEnv(t, node.EnvRollout)
	tag := rollout[strings.LastIndex(rollout, ":")+1:]
	runHelm(b, "upgrade", "ipvs-proxy", chart, "-n", "kube-system", "--reuse-values", "--set", "image.tag="+tag)
	second := waitProxy(ctx, b, rollout)
	b.step("helm upgrade to " + rollout + ", pod " + second.Name + " Ready")
	time.Sleep(settle)
	tr.finish(t)
	b.step("traffic")
}

// runHelm runs the guest's helm (EnvHelm) with args against the test API
// server (the admin kubeconfig), with no configuration, cache or
// repository of its own, and logs its output.
func runHelm(b *bed, args ...string) {
	b.t.Helper()
	home := b.t.TempDir()
	cmd := exec.Command(vmtest.GuestEnv(b.t, node.EnvHelm), append(args, "--kubeconfig", vmtest.GuestEnv(b.t, node.EnvAdminKubeconfig))...)
	cmd.Env = append(os.Environ(), "HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	b.t.Logf("helm %s:\n%s", strings.Join(args, " "), out)
}
