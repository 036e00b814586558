//go:build kernel

package chaos

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipvs-proxy/ipvs-proxy/test/ktest"
	"github.com/ipvs-proxy/ipvs-proxy/test/vmtest"
)

// bed is what both guest tests program and use: a node namespace with the
// steady service's two pods, a client pod, a client on the LAN, and the
// API server relayed into the node namespace, and an env for the proxy.
type bed struct {
	client kubernetes.Interface
	node   *ktest.Node
	pod    *ktest.Pod
	lan    *ktest.Client
	env    *env
}

// newBed makes the bed, with a client of at most qps requests a second to
// the API server (0: client-go's default).
func newBed(t *testing.T, qps float32) *bed {
	apiAddr := vmtest.GuestEnv(t, "VMTEST_API_ADDR")
	cfg, err := clientcmd.BuildConfigFromFlags("", vmtest.GuestEnv(t, "CHAOS_KUBECONFIG_GUEST"))
	if err != nil {
		t.Fatal(err)
	}
	if qps > 0 {
		cfg.QPS, cfg.Burst = qps, int(2*qps)
	}
	b := &bed{client: kubernetes.NewForConfigOrDie(cfg), node: ktest.NewNode(t)}
	b.node.AddPod(t, "pod-a", podA)
	b.node.AddPod(t, "pod-b", podB)
	b.pod = b.node.AddPod(t, "client", podClient)
	// The LAN client also gives the node its addresses (198.51.100.1 on the
	// bridge eth0): without them the node has no family to plan.
	b.lan = b.node.AddClient(t, "lan")
	_, apiPort, err := net.SplitHostPort(apiAddr)
	if err != nil {
		t.Fatal(err)
	}
	b.node.Relay(t, "127.0.0.1:"+apiPort, apiAddr)
	b.env = &env{t: t, node: b.node, bin: vmtest.GuestEnv(t, "CHAOS_PROXY_BIN"), kc: vmtest.GuestEnv(t, "CHAOS_KUBECONFIG_PROXY"), dir: t.TempDir()}
	b.env.stateDir = filepath.Join(b.env.dir, "state")
	return b
}

// webAddr reads the steady service's ClusterIP:80 into the env.
func (b *bed) webAddr(t *testing.T) *corev1.Service {
	web, err := b.client.CoreV1().Services(ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.env.webAddr = net.JoinHostPort(web.Spec.ClusterIP, "80")
	return web
}
