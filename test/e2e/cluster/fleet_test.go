//go:build !kernel

package cluster_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/cluster"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/gobuild"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/guest"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/kubeproxy"
)

// TestFleetVM is the mixed fleet of issue 13 item 5 and the seed's
// disaster across real nodes of issue 17 item 4, on the bed of
// TestClusterVM with kube-proxy v1.34 (IPVS mode) taking node-a back from
// ipvs-proxy: TestFleetGuest in the VM. It runs when asked (FLEET=1, which
// `make test-fleet` sets, with the kube-proxy `make kube-proxy` caches).
func TestFleetVM(t *testing.T) {
	if os.Getenv("FLEET") != "1" {
		t.Skip("the mixed-fleet and disaster tests run under `make test-fleet` (FLEET=1): they need the kube-proxy that `make kube-proxy` builds")
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	kpBin, err := kubeproxy.Binary(filepath.Join(wd, "..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	timeout := 25 * time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), timeout+5*time.Minute)
	defer cancel()
	srv := apiserver.Start(t)
	ctrl, err := cluster.StartControllers(ctx, srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer ctrl.Stop()
	// kube-proxy runs as kubeadm runs it: kube-system/kube-proxy bound to
	// system:node-proxier.
	if err := kubeproxy.Grant(ctx, kubernetes.NewForConfigOrDie(srv.Config())); err != nil {
		t.Fatal(err)
	}
	kpCfg, err := srv.ServiceAccountConfig(ctx, kubeproxy.ServiceAccountNamespace, kubeproxy.ServiceAccountName)
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	// Both proxies dial 127.0.0.1:PORT in their node namespace, relayed to
	// the host by the guest.
	guestKC, proxyKC := srv.WriteGuestKubeconfigs(t, dir, srv.Config())
	kpKC := filepath.Join(dir, "kube-proxy.kubeconfig")
	if err := srv.WriteKubeconfig(kpKC, kpCfg, srv.URL); err != nil {
		t.Fatal(err)
	}
	proxyBin := os.Getenv("IPVS_PROXY_BIN")
	if proxyBin == "" {
		proxyBin = gobuild.Proxy(t, dir)
	}
	guest.Run(ctx, t, dir, guest.Suite{Test: "TestFleetGuest", Timeout: timeout, Port: srv.Port,
		Env: []string{"CLUSTER_KUBECONFIG_ADMIN=" + guestKC, "CLUSTER_KUBECONFIG_PROXY=" + proxyKC,
			"CLUSTER_PROXY_BIN=" + proxyBin, "CLUSTER_KUBECONFIG_KUBE_PROXY=" + kpKC, "KUBE_PROXY_BIN=" + kpBin}})
}
