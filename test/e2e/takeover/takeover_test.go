//go:build !kernel

package takeover

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/apiserver"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/deploy"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/gobuild"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/guest"
	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/kubeproxy"
)

func TestMain(m *testing.M) { os.Exit(apiserver.RunMain(m)) }

// TestTakeover starts the API server on the host and runs TestTakeoverGuest
// in the VM against it (see the package doc). It runs when asked
// (TAKEOVER=1, which `make test-takeover` sets): `make test-e2e` compiles
// this package but leaves the VM run to its own target, which builds
// kube-proxy first.
func TestTakeover(t *testing.T) {
	if os.Getenv("TAKEOVER") != "1" {
		t.Skip("the takeover test runs under `make test-takeover` (TAKEOVER=1): it needs the kube-proxy that `make kube-proxy` builds")
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(wd, "..", "..", "..")
	kpBin, err := kubeproxy.Binary(root)
	if err != nil {
		t.Fatal(err)
	}
	timeout := 35 * time.Minute
	if n, err := strconv.Atoi(os.Getenv("TAKEOVER_CYCLES")); err == nil && n > 1 {
		timeout = time.Duration(10+10*n) * time.Minute // a cycle is 5 (idle host) to 9 (loaded) minutes under TCG
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout+5*time.Minute)
	defer cancel()

	srv := apiserver.Shared(t)
	// ipvs-proxy runs as deploy/base's ServiceAccount, kube-proxy as
	// kubeadm's.
	inst, err := deploy.Install(ctx, srv, deploy.Base)
	if err != nil {
		t.Fatal(err)
	}
	if err := kubeproxy.Grant(ctx, kubernetes.NewForConfigOrDie(srv.Config())); err != nil {
		t.Fatal(err)
	}
	kpCfg, err := srv.ServiceAccountConfig(ctx, kubeproxy.ServiceAccountNamespace, kubeproxy.ServiceAccountName)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// Both proxies reach the server at 127.0.0.1:PORT inside the node
	// namespace (the guest test relays it to the forwarded port).
	guestKC, proxyKC := srv.WriteGuestKubeconfigs(t, dir, inst.Config)
	kpKC := filepath.Join(dir, "kube-proxy.kubeconfig")
	if err := srv.WriteKubeconfig(kpKC, kpCfg, srv.URL); err != nil {
		t.Fatal(err)
	}

	proxyBin := os.Getenv("IPVS_PROXY_BIN")
	if proxyBin == "" {
		proxyBin = gobuild.Proxy(t, dir)
	}
	guest.Run(ctx, t, dir, guest.Suite{Test: "TestTakeoverGuest", BuildFlags: []string{"-vet=off"}, Timeout: timeout, Port: srv.Port,
		Env: []string{"TAKEOVER_KUBECONFIG_ADMIN=" + guestKC, "TAKEOVER_KUBECONFIG_KUBE_PROXY=" + kpKC,
			"TAKEOVER_KUBECONFIG_PROXY=" + proxyKC, "TAKEOVER_PROXY_BIN=" + proxyBin, "KUBE_PROXY_BIN=" + kpBin, "TAKEOVER_CYCLES=" + os.Getenv("TAKEOVER_CYCLES"),
			"TAKEOVER_MODE=" + os.Getenv("TAKEOVER_MODE")}})
}
