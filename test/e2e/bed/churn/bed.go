package churn

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

// Bed is what both guest tests program and use: a node namespace with the
// steady service's two pods, a client pod, a client on the LAN, and the
// API server relayed into the node namespace, and an env for the proxy.
type Bed struct {
	Client kubernetes.Interface
	Node   *ktest.Node
	Pod    *ktest.Pod
	LAN    *ktest.Client
	Env    *Env
}

// NewBed makes the bed, with a client of at most qps requests a second to
// the API server (0: client-go's default).
func NewBed(t *testing.T, qps float32) *Bed {
	apiAddr := vmtest.GuestEnv(t, "VMTEST_API_ADDR")
	cfg, err := clientcmd.BuildConfigFromFlags("", vmtest.GuestEnv(t, "CHAOS_KUBECONFIG_GUEST"))
	if err != nil {
		t.Fatal(err)
	}
	if qps > 0 {
		cfg.QPS, cfg.Burst = qps, int(2*qps)
	}
	b := &Bed{Client: kubernetes.NewForConfigOrDie(cfg), Node: ktest.NewNode(t)}
	b.Node.AddPod(t, "pod-a", podA)
	b.Node.AddPod(t, "pod-b", podB)
	b.Pod = b.Node.AddPod(t, "client", podClient)
	// The LAN client also gives the node its addresses (198.51.100.1 on the
	// bridge eth0): without them the node has no family to plan.
	b.LAN = b.Node.AddClient(t, "lan")
	_, apiPort, err := net.SplitHostPort(apiAddr)
	if err != nil {
		t.Fatal(err)
	}
	b.Node.Relay(t, "127.0.0.1:"+apiPort, apiAddr)
	b.Env = &Env{t: t, Node: b.Node, bin: vmtest.GuestEnv(t, "CHAOS_PROXY_BIN"), kc: vmtest.GuestEnv(t, "CHAOS_KUBECONFIG_PROXY"), dir: t.TempDir()}
	b.Env.stateDir = filepath.Join(b.Env.dir, "state")
	return b
}

// WebAddr reads the steady service's ClusterIP:80 into the env.
func (b *Bed) WebAddr(t *testing.T) *corev1.Service {
	web, err := b.Client.CoreV1().Services(ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.Env.WebAddr = net.JoinHostPort(web.Spec.ClusterIP, "80")
	return web
}
