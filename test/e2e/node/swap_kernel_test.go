//go:build kernel

package node_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/node"
	"github.com/ipvs-proxy/ipvs-proxy/test/vmtest"
)

// TestSwapGuest is the swap scenario's node: kubeadm's kube-proxy serves
// the web NodePort Service, then the image of kube-proxy's own DaemonSet is
// swapped for the release image, whose /usr/local/bin/kube-proxy is
// ipvs-proxy under kube-proxy's name (the migration EKS, kops and kubespray
// operators know). The DaemonSet controller replaces the pod, which runs
// kubeadm's command line unchanged. A client on the node sends requests to
// the ClusterIP and the NodePort the whole time; every one must succeed.
func TestSwapGuest(t *testing.T) {
	ctx := context.Background()
	b := startNode(t, nil)
	tr := kubeProxyUnderTraffic(ctx, b)
	defer tr.finish(t)

	tr.setPhase("swap")
	image := vmtest.GuestEnv(t, node.EnvSwap)
	ds, err := b.c.AppsV1().DaemonSets(metav1.NamespaceSystem).Get(ctx, "kube-proxy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ds.Spec.Template.Spec.Containers[0].Image = image
	if _, err := b.c.AppsV1().DaemonSets(metav1.NamespaceSystem).Update(ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// kubeadm's DaemonSet has no readiness probe: the pod is Ready when it
	// runs, so wait for the proxy's own /healthz (200 after its first sync).
	client := &http.Client{Timeout: 3 * time.Second}
	b.wait("kube-proxy's DaemonSet running "+image+", /healthz 200", 10*time.Minute, 500*time.Millisecond, func() (bool, error) {
		p, err := onePod(ctx, b, "k8s-app=kube-proxy")
		if err != nil {
			return false, err
		}
		if p.Spec.Containers[0].Image != image || !podReady(p) {
			return false, fmt.Errorf("pod %s: %s: %s", p.Name, p.Spec.Containers[0].Image, podSummary(p))
		}
		err = get(client, "http://127.0.0.1:10256/healthz")
		return err == nil, err
	})
	b.step("kube-proxy's DaemonSet swapped to " + image + ", synced")
	time.Sleep(settle)
	tr.finish(t)
	b.step("traffic")
}
