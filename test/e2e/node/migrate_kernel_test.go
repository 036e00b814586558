//go:build kernel

package node_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/deploy"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/node"
	"github.com/ipvs-proxy/ipvs-proxy/test/vmtest"
)

// settle is how long the traffic goes on after each step's pod is Ready.
const settle = 10 * time.Second

// TestMigrateGuest is the migrate scenario's node. kubeadm's kube-proxy
// DaemonSet (image KubeProxyImage, IPVS mode) serves the web NodePort
// Service; a client on the node then sends requests to its ClusterIP and
// NodePort the whole time while:
//
//   - replace: kube-proxy's DaemonSet is deleted and the replace-kube-proxy
//     overlay applied, as docs/migration.md says; ipvs-proxy's pod waits for
//     kube-proxy's port, starts on what kube-proxy left and turns Ready;
//   - rollout: ipvs-proxy's DaemonSet gets the new version's image and the
//     DaemonSet controller replaces the pod.
//
// Every request of every phase must succeed; the counts are in the output.
func TestMigrateGuest(t *testing.T) {
	ctx := context.Background()
	b := startNode(t, nil)
	c := b.c
	tr := kubeProxyUnderTraffic(ctx, b)
	defer tr.finish(t)

	tr.setPhase("replace")
	deleteKubeProxy(ctx, b)
	objs, err := deploy.Build(deploy.ReplaceKubeProxy)
	if err != nil {
		t.Fatal(err)
	}
	a, err := deploy.NewApplier(b.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Apply(ctx, objs, false); err != nil {
		t.Fatal(err)
	}
	first := waitProxy(ctx, b, "")
	b.step("replace-kube-proxy applied, ipvs-proxy pod " + first.Name + " Ready")
	time.Sleep(settle)

	tr.setPhase("rollout")
	rollout := vmtest.GuestEnv(t, node.EnvRollout)
	ds, err := c.AppsV1().DaemonSets(metav1.NamespaceSystem).Get(ctx, "ipvs-proxy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec := &ds.Spec.Template.Spec
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			cs[i].Image = rollout
		}
	}
	if _, err := c.AppsV1().DaemonSets(metav1.NamespaceSystem).Update(ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	second := waitProxy(ctx, b, rollout)
	b.step("rollout to " + rollout + ", pod " + second.Name + " Ready")
	time.Sleep(settle)
	tr.finish(t)
	b.step("traffic")
}

// kubeProxyUnderTraffic waits until kubeadm's kube-proxy pod is Ready and
// the web pod is behind the web Service's ClusterIP and NodePort in IPVS,
// then starts the client on both and lets it run for settle in phase
// "kube-proxy".
func kubeProxyUnderTraffic(ctx context.Context, b *bed) *traffic {
	b.t.Helper()
	web, err := b.c.CoreV1().Services(node.WebNamespace).Get(ctx, node.WebService, metav1.GetOptions{})
	if err != nil {
		b.t.Fatal(err)
	}
	vip := net.JoinHostPort(web.Spec.ClusterIP, strconv.Itoa(node.WebPort))
	nodePort := net.JoinHostPort(node.NodeIP, strconv.Itoa(node.WebNodePort))
	b.wait("kube-proxy's pod Ready, the web pod behind "+vip+" and "+nodePort, 10*time.Minute, time.Second, func() (bool, error) {
		if p, err := onePod(ctx, b, "k8s-app=kube-proxy"); err != nil || !podReady(p) {
			return false, err
		}
		p, err := b.c.CoreV1().Pods(node.WebNamespace).Get(ctx, "web-0", metav1.GetOptions{})
		if err != nil || !podReady(p) {
			return false, err
		}
		backend := "-> " + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(node.WebTargetPort))
		out, err := run("ipvsadm", "-Ln")
		return strings.Contains(out, "TCP  "+vip) && strings.Contains(out, "TCP  "+nodePort) && strings.Count(out, backend) >= 2, err
	})
	b.step("kube-proxy " + node.KubeProxyImage + " serving " + vip + " and " + nodePort)
	tr := startTraffic("kube-proxy", 100*time.Millisecond, vip, nodePort)
	time.Sleep(settle)
	return tr
}

// deleteKubeProxy deletes kube-proxy's DaemonSet and waits until its pod
// is gone, docs/migration.md's step before the replace.
func deleteKubeProxy(ctx context.Context, b *bed) {
	b.t.Helper()
	c := b.c
	if err := c.AppsV1().DaemonSets(metav1.NamespaceSystem).Delete(ctx, "kube-proxy", metav1.DeleteOptions{}); err != nil {
		b.t.Fatal(err)
	}
	b.wait("kube-proxy's pod gone", 3*time.Minute, time.Second, func() (bool, error) {
		pods, err := c.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-proxy"})
		return err == nil && len(pods.Items) == 0, err
	})
	b.step("kube-proxy's DaemonSet deleted, its pod gone")
}

// onePod is the one pod of kube-system with the label selector sel.
func onePod(ctx context.Context, b *bed, sel string) (*corev1.Pod, error) {
	pods, err := b.c.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, err
	}
	if len(pods.Items) != 1 {
		return nil, fmt.Errorf("%d pods with %s", len(pods.Items), sel)
	}
	return &pods.Items[0], nil
}

// waitProxy waits until ipvs-proxy's DaemonSet has one pod, of image (any
// when empty), Ready, and its status says the rollout is complete.
func waitProxy(ctx context.Context, b *bed, image string) *corev1.Pod {
	b.t.Helper()
	var pod *corev1.Pod
	what := "ipvs-proxy's pod Ready"
	if image != "" {
		what += " with " + image
	}
	b.wait(what, 10*time.Minute, 500*time.Millisecond, func() (bool, error) {
		ds, err := b.c.AppsV1().DaemonSets(metav1.NamespaceSystem).Get(ctx, "ipvs-proxy", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		st := ds.Status
		if st.ObservedGeneration < ds.Generation || st.UpdatedNumberScheduled != 1 || st.NumberAvailable != 1 {
			return false, fmt.Errorf("DaemonSet status %+v", st)
		}
		p, err := onePod(ctx, b, metav1.FormatLabelSelector(ds.Spec.Selector))
		if err != nil {
			return false, err
		}
		pod = p
		if image != "" && p.Spec.Containers[0].Image != image {
			return false, fmt.Errorf("pod %s has image %s", p.Name, p.Spec.Containers[0].Image)
		}
		return podReady(p), fmt.Errorf("pod %s: %s", p.Name, podSummary(p))
	})
	return pod
}
