//go:build !kernel

package kubeproxy

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ipvs-proxy/ipvs-proxy/test/e2e/bed/guest"
)

// TestStartupCleanup pins what the way out to kube-proxy's nftables mode
// relies on (docs/migration.md): kube-proxy v1.34 in nftables mode flushes
// the IPVS table and deletes kube-ipvs0 at start when `modprobe -va ip_vs`
// works in its container, and leaves both when /lib/modules is empty (its
// DaemonSet without kubeadm's lib-modules volume). It boots the VM
// (TestStartupCleanupGuest) when asked: KUBE_PROXY_CLEANUP=1, which `make
// test-kube-proxy-cleanup` sets after building kube-proxy.
func TestStartupCleanup(t *testing.T) {
	if os.Getenv("KUBE_PROXY_CLEANUP") != "1" {
		t.Skip("runs under `make test-kube-proxy-cleanup` (KUBE_PROXY_CLEANUP=1): it needs the kube-proxy that `make kube-proxy` builds")
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := Binary(filepath.Join(wd, "..", "..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	timeout := 10 * time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), timeout+5*time.Minute)
	defer cancel()
	guest.Run(ctx, t, t.TempDir(), guest.Suite{Test: "TestStartupCleanupGuest", BuildFlags: []string{"-vet=off"}, Timeout: timeout,
		Env: []string{"KUBE_PROXY_BIN=" + bin}})
}
